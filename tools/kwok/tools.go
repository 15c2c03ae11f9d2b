//go:build tools

// Package tools pins kwok, the kubelet stand-in of the tests' living cluster: it marks Karpenter's nodes Ready,
// renews their leases and moves their pods through the Stages the tests give it (gpupack/testing/living_cluster.py).
// tools/build builds it at the version in go.mod.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
