package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/google/cel-go/common/types"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/dynamic-resource-allocation/cel"
)

func f(t *types.Type) string { return t.String() }

func main() {
	c := cel.GetCompiler(cel.Features{EnableConsumableCapacity: true})
	r := c.CompileCELExpression("true", cel.Options{})
	env := r.Environment
	_ = environment.StoredExpressions
	fns := env.Functions()
	names := make([]string, 0, len(fns))
	for n := range fns {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fd := fns[n]
		for _, o := range fd.OverloadDecls() {
			args := []string{}
			for _, a := range o.ArgTypes() {
				args = append(args, f(a))
			}
			fmt.Printf("%s\t%s\tmember=%v\t(%s)\t-> %s\tparams=%v\ttrait=%d\tnonstrict=%v\n", n, o.ID(), o.IsMemberFunction(), strings.Join(args, ", "), f(o.ResultType()), o.TypeParams(), o.OperandTrait(), o.IsNonStrict())
		}
	}
	for _, v := range env.Variables() {
		fmt.Printf("VAR %s %s\n", v.Name(), v.Type())
	}
	for _, m := range env.Macros() {
		fmt.Printf("MACRO %s %d receiver=%v\n", m.Function(), m.ArgCount(), m.IsReceiverStyle())
	}
}
