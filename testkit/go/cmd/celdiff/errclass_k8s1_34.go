//go:build k8s1_34

package main

// errorClass: Kubernetes 1.34 has no node-local allocation errors; every error of Allocate
// fails the pod's scheduling attempt.
func errorClass(err error) string {
	_ = err
	return "abort"
}
