//go:build k8s1_34

package main

import (
	"k8s.io/component-base/featuregate"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
)

// Kubernetes 1.34 has no AllocatorFeatures function: the DynamicResources plugin (New) fills
// structured.Features from these gate fields inline, and its CEL cache gets consumable capacity only.

func allocatorFeatures(fts feature.Features) structured.Features {
	return structured.Features{
		AdminAccess:          fts.EnableDRAAdminAccess,
		PrioritizedList:      fts.EnableDRAPrioritizedList,
		PartitionableDevices: fts.EnablePartitionableDevices,
		DeviceTaints:         fts.EnableDRADeviceTaints,
		DeviceBinding:        fts.EnableDRADeviceBindingConditions,
		DeviceStatus:         fts.EnableDRAResourceClaimDeviceStatus,
		ConsumableCapacity:   fts.EnableConsumableCapacity,
	}
}

func celFeatures(fts feature.Features) cel.Features {
	return cel.Features{EnableConsumableCapacity: fts.EnableConsumableCapacity}
}

func dependencies(fg featuregate.MutableVersionedFeatureGate) map[featuregate.Feature][]featuregate.Feature {
	return nil
}

func celListFeature(c cel.Features) []string {
	return nil
}

func specMinCompatibility(s featuregate.FeatureSpec) string {
	return ""
}
