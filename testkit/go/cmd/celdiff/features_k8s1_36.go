//go:build k8s1_36

package main

import (
	"k8s.io/component-base/featuregate"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
)

// The scheduler's own mapping (dynamicresources.AllocatorFeatures); its DynamicResources plugin
// (New) gives its CEL cache consumable capacity and list-type attributes.

func allocatorFeatures(fts feature.Features) structured.Features {
	return dynamicresources.AllocatorFeatures(fts)
}

func celFeatures(fts feature.Features) cel.Features {
	return cel.Features{
		EnableConsumableCapacity: fts.EnableDRAConsumableCapacity,
		EnableListTypeAttributes: fts.EnableDRAListTypeAttributes,
	}
}

func dependencies(fg featuregate.MutableVersionedFeatureGate) map[featuregate.Feature][]featuregate.Feature {
	return fg.Dependencies()
}

func celListFeature(c cel.Features) []string {
	return listFeature(c.EnableListTypeAttributes)
}

func specMinCompatibility(s featuregate.FeatureSpec) string {
	if s.MinCompatibilityVersion == nil {
		return ""
	}
	return s.MinCompatibilityVersion.String()
}
