package main

import (
	"context"

	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/dynamic-resource-allocation/cel"
)

// costAnswer answers {"kind":"cost","driver":D,"device":<resource.k8s.io/v1 Device>,"expression":E}:
// what the API server's validation estimates for E as a new selector (the NewExpressions
// environment with cost estimation: CompilationResult.MaxCost, which validation holds to
// resource.CELSelectorExpressionMaxCost) or why it does not compile there, and what the
// scheduler's evaluation on the device charged (EvalDetails.ActualCost, also when the cost limit
// cancelled it) with its result or error.
type costAnswer struct {
	Estimate      *uint64 `json:"estimate,omitempty"`
	EstimateError string  `json:"estimateError,omitempty"`
	Actual        *uint64 `json:"actual,omitempty"`
	Result        *bool   `json:"result,omitempty"`
	Error         string  `json:"error,omitempty"`
	Message       string  `json:"message,omitempty"`
}

func evalCost(ctx context.Context, c *inputCase) any {
	g, err := gatesFor(c.FeatureGates)
	if err != nil {
		return selectorAnswer{Error: "gates", Message: err.Error()}
	}
	var ans costAnswer
	envType := environment.NewExpressions
	validated := cel.GetCompiler(g.cel).CompileCELExpression(c.Expression, cel.Options{EnvType: &envType})
	if validated.Error != nil {
		ans.EstimateError = validated.Error.Error()
	} else {
		maxCost := validated.MaxCost
		ans.Estimate = &maxCost
	}
	if c.Device == nil {
		return ans
	}
	expr := compile(g.cel, c.Expression)
	if expr.Error != nil {
		ans.Error, ans.Message = "compile", expr.Error.Error()
		return ans
	}
	matches, details, err := expr.DeviceMatches(ctx, cel.Device{
		Driver:                   c.Driver,
		AllowMultipleAllocations: c.Device.AllowMultipleAllocations,
		Attributes:               c.Device.Attributes,
		Capacity:                 c.Device.Capacity,
	})
	if details != nil {
		ans.Actual = details.ActualCost()
	}
	if err != nil {
		ans.Error, ans.Message = "runtime", err.Error()
		return ans
	}
	ans.Result = &matches
	return ans
}
