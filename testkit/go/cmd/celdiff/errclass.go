//go:build !k8s1_34

package main

import (
	"errors"

	"k8s.io/dynamic-resource-allocation/structured"
)

// errorClass is "node" for an error that fails only this node (the scheduler tries others),
// "abort" for one that fails the pod's scheduling attempt.
func errorClass(err error) string {
	if errors.Is(err, structured.ErrFailedAllocationOnNode) {
		return "node"
	}
	return "abort"
}
