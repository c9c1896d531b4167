//go:build k8s1_36

package main

import (
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// Kubernetes 1.36 default gates: consumable capacity, partitionable devices, device taints and
// binding conditions beta (on); list-type attributes alpha (off). The "incubating" allocator.
var celFeatures = cel.Features{EnableConsumableCapacity: true, EnableListTypeAttributes: false}

var allocatorFeatures = structured.Features{
	AdminAccess:            true,
	PrioritizedList:        true,
	PartitionableDevices:   true,
	DeviceTaints:           true,
	DeviceBindingAndStatus: true,
	ConsumableCapacity:     true,
}
