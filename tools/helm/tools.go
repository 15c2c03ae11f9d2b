//go:build tools

// Package tools pins the helm the tests install the chart with, at the version in go.mod. tools/build builds it.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
