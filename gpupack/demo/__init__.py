"""The embedded demo behind `make run`: webhook and extender on localhost, an embedded cluster, no Kubernetes."""
