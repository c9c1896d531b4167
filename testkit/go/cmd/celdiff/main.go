// Command celdiff answers DRA selector and allocation questions with the Kubernetes
// scheduler's own Go code (k8s.io/dynamic-resource-allocation at the release it is built
// for: testkit/go/K8S_VERSION, or one of testkit/go/K8S_MATRIX), so the differential tests can hold dra-gpu's Python CEL
// environment and allocation simulator to it.  Test infrastructure only.
//
// Input: JSON lines on stdin, one case per line; output: one JSON line per case, in order.
//
//	{"kind":"selector","driver":D,"device":<resource.k8s.io/v1 Device>,"expression":E}
//	  -> {"result":true|false} | {"error":"compile"|"runtime","message":M}
//	{"kind":"allocate","node":N,"nodeLabels":{..},"slices":[..],"classes":[..],"claims":[..],"allocated":[..]}
//	  -> {"outcome":"allocated","claims":[[{"request","driver","pool","device",...}]]}
//	   | {"outcome":"unsatisfiable"}
//	   | {"outcome":"error","class":"node"|"abort","message":M}
//	{"kind":"bench","driver":D,"devices":[..],"expressions":[..]}
//	  -> {"compileSeconds":S,"evalSeconds":S,"evaluations":N,"matches":[..],"errors":[..]}
//	{"kind":"cost","driver":D,"device":<resource.k8s.io/v1 Device>,"expression":E}
//	  -> {"estimate":N | "estimateError":M, "actual":N, "result":B | "error":"compile"|"runtime","message":M} (cost.go)
//	{"kind":"gates"}
//	  -> {"binaryVersion","emulationVersion","minCompatibilityVersion","enabled":{gate:bool},
//	      "specs":{gate:[..]},"dependencies":{..},"allocatorFeatures":[..],"celFeatures":[..],"allocator":V}
//
// Any case may carry "featureGates":"Foo=true,Bar=false" (kube-scheduler's --feature-gates); it is
// answered as a scheduler started with that flag answers; a value the scheduler refuses at start-up
// answers {"error":"gates","message":M}.
//
// Selectors compile as the scheduler's CEL cache compiles them: the StoredExpressions
// environment, no cost estimation, the runtime cost limit of the API.  Features come from the
// release's feature gates as kube-scheduler computes them (gates.go) and maps them
// (features_k8s1_<minor>.go, picked by the build tag testkit/go/build.sh passes), so each release's
// oracle answers as that release's scheduler does out of the box.  A malformed line answers
// {"error":"input","message":M}.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"
)

type inputCase struct {
	Kind         string `json:"kind"`
	FeatureGates string `json:"featureGates"`

	// selector
	Driver     string              `json:"driver"`
	Device     *resourceapi.Device `json:"device"`
	Expression string              `json:"expression"`

	// allocate
	Node       string                       `json:"node"`
	NodeLabels map[string]string            `json:"nodeLabels"`
	Slices     []*resourceapi.ResourceSlice `json:"slices"`
	Classes    []*resourceapi.DeviceClass   `json:"classes"`
	Claims     []*resourceapi.ResourceClaim `json:"claims"`
	Allocated  []*resourceapi.ResourceClaim `json:"allocated"`

	// bench
	Devices     []resourceapi.Device `json:"devices"`
	Expressions []string             `json:"expressions"`
}

type selectorAnswer struct {
	Result  *bool  `json:"result,omitempty"`
	Error   string `json:"error,omitempty"`
	Message string `json:"message,omitempty"`
}

type deviceResult struct {
	Request          string            `json:"request"`
	Driver           string            `json:"driver"`
	Pool             string            `json:"pool"`
	Device           string            `json:"device"`
	AdminAccess      bool              `json:"adminAccess,omitempty"`
	Shared           bool              `json:"shared,omitempty"`
	ConsumedCapacity map[string]string `json:"consumedCapacity,omitempty"`
}

type allocateAnswer struct {
	Outcome string           `json:"outcome"`
	Claims  [][]deviceResult `json:"claims,omitempty"`
	Class   string           `json:"class,omitempty"`
	Message string           `json:"message,omitempty"`
}

type benchAnswer struct {
	CompileSeconds float64 `json:"compileSeconds"`
	EvalSeconds    float64 `json:"evalSeconds"`
	Evaluations    int     `json:"evaluations"`
	Matches        []int   `json:"matches"`
	Errors         []int   `json:"errors"`
}

type compileKey struct {
	features   cel.Features
	expression string
}

// compiled caches compilations across cases; the scheduler's cache keeps only
// successful results, which gives the same answers.
var compiled = map[compileKey]cel.CompilationResult{}

func compile(features cel.Features, expression string) cel.CompilationResult {
	key := compileKey{features, expression}
	if r, ok := compiled[key]; ok {
		return r
	}
	r := cel.GetCompiler(features).CompileCELExpression(expression, cel.Options{DisableCostEstimation: true})
	compiled[key] = r
	return r
}

func evalSelector(ctx context.Context, c *inputCase) selectorAnswer {
	if c.Device == nil {
		return selectorAnswer{Error: "input", Message: "selector case without a device"}
	}
	g, err := gatesFor(c.FeatureGates)
	if err != nil {
		return selectorAnswer{Error: "gates", Message: err.Error()}
	}
	expr := compile(g.cel, c.Expression)
	if expr.Error != nil {
		return selectorAnswer{Error: "compile", Message: expr.Error.Error()}
	}
	matches, _, err := expr.DeviceMatches(ctx, cel.Device{
		Driver:                   c.Driver,
		AllowMultipleAllocations: c.Device.AllowMultipleAllocations,
		Attributes:               c.Device.Attributes,
		Capacity:                 c.Device.Capacity,
	})
	if err != nil {
		return selectorAnswer{Error: "runtime", Message: err.Error()}
	}
	return selectorAnswer{Result: &matches}
}

// classLister serves the case's DeviceClasses; a missing one is NotFound as from an informer lister.
type classLister map[string]*resourceapi.DeviceClass

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(l))
	for _, c := range l {
		out = append(out, c)
	}
	return out, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if c, ok := l[name]; ok {
		return c, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: "resource.k8s.io", Resource: "deviceclass"}, name)
}

// allocatedState is what the scheduler's claim tracker gathers from allocated claims
// (GatherAllocatedState with consumable capacity on): admin-access results do not
// count, results with a share ID are shared allocations with their consumed capacity.
func allocatedState(claims []*resourceapi.ResourceClaim) structured.AllocatedState {
	st := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, claim := range claims {
		if claim.Status.Allocation == nil {
			continue
		}
		for _, r := range claim.Status.Allocation.Devices.Results {
			if ptr.Deref(r.AdminAccess, false) {
				continue
			}
			id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
			if r.ShareID != nil {
				st.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
				if r.ConsumedCapacity != nil {
					st.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
				}
				continue
			}
			st.AllocatedDevices.Insert(id)
		}
	}
	return st
}

func allocate(ctx context.Context, c *inputCase) allocateAnswer {
	g, err := gatesFor(c.FeatureGates)
	if err != nil {
		return allocateAnswer{Outcome: "error", Class: "gates", Message: err.Error()}
	}
	classes := classLister{}
	for _, cl := range c.Classes {
		classes[cl.Name] = cl
	}
	cache := cel.NewCache(10, g.cel)
	alloc, err := structured.NewAllocator(ctx, g.allocator, allocatedState(c.Allocated), classes, c.Slices, cache)
	if err != nil {
		return allocateAnswer{Outcome: "error", Class: "abort", Message: err.Error()}
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: c.Node, Labels: c.NodeLabels}}
	results, err := alloc.Allocate(ctx, node, c.Claims)
	if err != nil {
		return allocateAnswer{Outcome: "error", Class: errorClass(err), Message: err.Error()}
	}
	if results == nil {
		return allocateAnswer{Outcome: "unsatisfiable"}
	}
	out := allocateAnswer{Outcome: "allocated", Claims: make([][]deviceResult, len(results))}
	for i, res := range results {
		devs := make([]deviceResult, 0, len(res.Devices.Results))
		for _, r := range res.Devices.Results {
			d := deviceResult{
				Request:     r.Request,
				Driver:      r.Driver,
				Pool:        r.Pool,
				Device:      r.Device,
				AdminAccess: ptr.Deref(r.AdminAccess, false),
				Shared:      r.ShareID != nil,
			}
			if len(r.ConsumedCapacity) > 0 {
				d.ConsumedCapacity = map[string]string{}
				for k, v := range r.ConsumedCapacity {
					d.ConsumedCapacity[string(k)] = v.String()
				}
			}
			devs = append(devs, d)
		}
		out.Claims[i] = devs
	}
	return out
}

// bench times what the scheduler does per (selector, device): DeviceMatches, which
// builds the device's CEL value and evaluates the compiled program.
func bench(ctx context.Context, c *inputCase) (benchAnswer, error) {
	ans := benchAnswer{Matches: make([]int, len(c.Expressions)), Errors: make([]int, len(c.Expressions))}
	g, err := gatesFor(c.FeatureGates)
	if err != nil {
		return ans, err
	}
	start := time.Now()
	exprs := make([]cel.CompilationResult, len(c.Expressions))
	for i, e := range c.Expressions {
		exprs[i] = cel.GetCompiler(g.cel).CompileCELExpression(e, cel.Options{DisableCostEstimation: true})
		if exprs[i].Error != nil {
			return ans, fmt.Errorf("expression #%d: %w", i, exprs[i].Error)
		}
	}
	ans.CompileSeconds = time.Since(start).Seconds()
	start = time.Now()
	for i := range exprs {
		for j := range c.Devices {
			d := &c.Devices[j]
			m, _, err := exprs[i].DeviceMatches(ctx, cel.Device{
				Driver:                   c.Driver,
				AllowMultipleAllocations: d.AllowMultipleAllocations,
				Attributes:               d.Attributes,
				Capacity:                 d.Capacity,
			})
			switch {
			case err != nil:
				ans.Errors[i]++
			case m:
				ans.Matches[i]++
			}
			ans.Evaluations++
		}
	}
	ans.EvalSeconds = time.Since(start).Seconds()
	return ans, nil
}

func answer(ctx context.Context, line []byte) any {
	var c inputCase
	if err := json.Unmarshal(line, &c); err != nil {
		return selectorAnswer{Error: "input", Message: err.Error()}
	}
	switch c.Kind {
	case "selector":
		return evalSelector(ctx, &c)
	case "allocate":
		return allocate(ctx, &c)
	case "gates":
		return gates(c.FeatureGates)
	case "cost":
		return evalCost(ctx, &c)
	case "bench":
		ans, err := bench(ctx, &c)
		if err != nil {
			return selectorAnswer{Error: "input", Message: err.Error()}
		}
		return ans
	default:
		return selectorAnswer{Error: "input", Message: fmt.Sprintf("unknown kind %q", c.Kind)}
	}
}

func main() {
	ctx := context.Background()
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	out := bufio.NewWriterSize(os.Stdout, 1<<16)
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	for {
		line, err := in.ReadBytes('\n')
		if len(line) > 0 && !(len(line) == 1 && line[0] == '\n') {
			if encErr := enc.Encode(answer(ctx, line)); encErr != nil {
				fmt.Fprintln(os.Stderr, "celdiff:", encErr)
				os.Exit(1)
			}
			// Answer each line as it comes so an interactive caller never waits on a buffer.
			if in.Buffered() == 0 {
				if flushErr := out.Flush(); flushErr != nil {
					fmt.Fprintln(os.Stderr, "celdiff:", flushErr)
					os.Exit(1)
				}
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "celdiff:", err)
			os.Exit(1)
		}
	}
	if err := out.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, "celdiff:", err)
		os.Exit(1)
	}
}
