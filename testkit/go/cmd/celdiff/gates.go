package main

// The scheduler's feature gates, computed as kube-scheduler computes them at start-up: its own
// options (cmd/kube-scheduler/app/options) on a fresh component registry holding a copy of the
// default feature gate (every gate the binary registers) and the binary's effective version
// (emulation version = binary, minimum compatibility version = binary - 1, from the gitVersion
// testkit/go/build.sh links in), the --feature-gates flag parsed by those options, then the scheduler's
// mapping of the gates to the allocator's and the CEL environment's features
// (features_k8s1_<minor>.go). Every case is answered with the features of its "featureGates"
// (none: the release's defaults), so the oracle answers as a stock scheduler, or one started with
// those flags, does.

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/util/compatibility"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/component-base/featuregate"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
)

type schedulerGates struct {
	gate      featuregate.MutableVersionedFeatureGate
	effective basecompatibility.EffectiveVersion
	allocator structured.Features
	cel       cel.Features
}

var (
	gatesMu    sync.Mutex
	gatesCache = map[string]*schedulerGates{}
	gatesErr   = map[string]error{}
)

// gatesFor evaluates --feature-gates=<flags> ("" for none) once per distinct value.
func gatesFor(flags string) (*schedulerGates, error) {
	gatesMu.Lock()
	defer gatesMu.Unlock()
	if g, ok := gatesCache[flags]; ok {
		return g, nil
	}
	if err, ok := gatesErr[flags]; ok {
		return nil, err
	}
	g, err := evalGates(flags)
	if err != nil {
		gatesErr[flags] = err
		return nil, err
	}
	gatesCache[flags] = g
	return g, nil
}

func evalGates(flags string) (*schedulerGates, error) {
	registry := basecompatibility.NewComponentGlobalsRegistry()
	fg := utilfeature.DefaultMutableFeatureGate.DeepCopy()
	effective := compatibility.DefaultBuildEffectiveVersion()
	if err := registry.Register(basecompatibility.DefaultKubeComponent, effective, fg); err != nil {
		return nil, err
	}
	opts := options.NewOptionsWithComponentGlobalsRegistry(registry)
	fs := pflag.NewFlagSet("kube-scheduler", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for _, set := range opts.Flags.FlagSets {
		fs.AddFlagSet(set)
	}
	var args []string
	if flags != "" {
		args = append(args, "--feature-gates="+flags)
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if err := registry.Set(); err != nil {
		return nil, err
	}
	if errs := registry.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("%v", errs)
	}
	fts := feature.NewSchedulerFeaturesFromGates(fg)
	return &schedulerGates{gate: fg, effective: effective, allocator: allocatorFeatures(fts), cel: celFeatures(fts)}, nil
}

type specAnswer struct {
	Version          string `json:"version"`
	Default          bool   `json:"default"`
	PreRelease       string `json:"preRelease"`
	LockToDefault    bool   `json:"lockToDefault,omitempty"`
	MinCompatibility string `json:"minCompatibilityVersion,omitempty"`
}

type gatesAnswer struct {
	BinaryVersion           string                  `json:"binaryVersion"`
	EmulationVersion        string                  `json:"emulationVersion"`
	MinCompatibilityVersion string                  `json:"minCompatibilityVersion"`
	Enabled                 map[string]bool         `json:"enabled"`
	Specs                   map[string][]specAnswer `json:"specs"`
	Dependencies            map[string][]string     `json:"dependencies"`
	AllocatorFeatures       []string                `json:"allocatorFeatures"`
	CELFeatures             []string                `json:"celFeatures"`
	Allocator               string                  `json:"allocator"`
}

// gates answers {"kind":"gates","featureGates":F}: every gate the scheduler knows with its value
// and versioned specs, the gates' dependencies, and what the DRA plugin makes of them.
func gates(flags string) any {
	g, err := gatesFor(flags)
	if err != nil {
		return selectorAnswer{Error: "gates", Message: err.Error()}
	}
	ans := gatesAnswer{
		BinaryVersion:           g.effective.BinaryVersion().String(),
		EmulationVersion:        g.effective.EmulationVersion().String(),
		MinCompatibilityVersion: g.effective.MinCompatibilityVersion().String(),
		Enabled:                 map[string]bool{},
		Specs:                   map[string][]specAnswer{},
		Dependencies:            map[string][]string{},
		AllocatorFeatures:       sets.List(g.allocator.Set()),
		Allocator:               allocatorVariant(g),
	}
	for name, specs := range g.gate.GetAllVersioned() {
		ans.Enabled[string(name)] = g.gate.Enabled(name)
		for _, s := range specs {
			a := specAnswer{Version: s.Version.String(), Default: s.Default, PreRelease: string(s.PreRelease), LockToDefault: s.LockToDefault}
			if mc := specMinCompatibility(s); mc != "" {
				a.MinCompatibility = mc
			}
			ans.Specs[string(name)] = append(ans.Specs[string(name)], a)
		}
	}
	for name, deps := range dependencies(g.gate) {
		for _, d := range deps {
			ans.Dependencies[string(name)] = append(ans.Dependencies[string(name)], string(d))
		}
	}
	if g.cel.EnableConsumableCapacity {
		ans.CELFeatures = append(ans.CELFeatures, "EnableConsumableCapacity")
	}
	ans.CELFeatures = append(ans.CELFeatures, celListFeature(g.cel)...)
	return ans
}

// allocatorVariant is the package of the allocator structured.NewAllocator picks ("incubating", ...).
func allocatorVariant(g *schedulerGates) string {
	alloc, err := structured.NewAllocator(context.Background(), g.allocator, structured.AllocatedState{}, classLister{}, nil, cel.NewCache(1, g.cel))
	if err != nil {
		return "error: " + err.Error()
	}
	t := strings.TrimPrefix(fmt.Sprintf("%T", alloc), "*") // *incubating.Allocator
	pkg, _, _ := strings.Cut(t, ".")
	return pkg
}

func listFeature(on bool) []string {
	if on {
		return []string{"EnableListTypeAttributes"}
	}
	return nil
}
