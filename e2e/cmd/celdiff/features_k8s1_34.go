//go:build k8s1_34

package main

import (
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// Kubernetes 1.34 default gates: admin access and prioritized list beta (on), device status
// beta (on); partitionable devices, device taints, binding conditions, consumable capacity alpha (off).
var celFeatures = cel.Features{EnableConsumableCapacity: false}

var allocatorFeatures = structured.Features{
	AdminAccess:     true,
	PrioritizedList: true,
	DeviceStatus:    true,
}
