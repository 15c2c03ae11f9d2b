//go:build tools

// Package tools pins Karpenter's KWOK provider, the node autoscaler of the tests' living cluster: Karpenter's
// core controllers (provisioning, consolidation, disruption) with a cloud provider that makes Node objects instead
// of machines (gpupack/testing/living_cluster.py). tools/build builds it at the version in go.mod, with the Go toolchain that
// version's go.mod asks for.
package tools

import _ "sigs.k8s.io/karpenter/kwok"
