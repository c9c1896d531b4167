//go:build k8s1_37

package main

import (
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// Kubernetes 1.37 default gates: as 1.36 (device taints now GA) plus fractional capacity
// ranges (beta, on); list-type attributes, derived attributes, compatibility groups and
// optional node operations alpha (off).
var celFeatures = cel.Features{EnableConsumableCapacity: true, EnableListTypeAttributes: false}

var allocatorFeatures = structured.Features{
	AdminAccess:             true,
	PrioritizedList:         true,
	PartitionableDevices:    true,
	DeviceTaints:            true,
	DeviceBindingAndStatus:  true,
	ConsumableCapacity:      true,
	FractionalCapacityRange: true,
}
