//go:build k8s1_35

package main

import (
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// Kubernetes 1.35 default gates: as 1.34 (admin access, prioritized list on; partitionable
// devices, device taints, binding conditions, consumable capacity alpha and off).
var celFeatures = cel.Features{EnableConsumableCapacity: false}

var allocatorFeatures = structured.Features{
	AdminAccess:     true,
	PrioritizedList: true,
}
