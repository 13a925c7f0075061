// Package composetest runs deploy/compose/compose.yaml as a real cluster
// of containers, each a host with its own address on a private network,
// for the tests that cross hosts: the compose cluster's own tests and the
// soak. It builds the images once per test binary (deploy/images), brings
// a project up on a subnet of its own, and takes everything it made down
// when the test ends, failing the test if anything is left.
//
// It also makes faults inside the cluster, from the host: signals and
// restarts through docker-compose, freezes (docker pause), and, in a
// container's own network namespace (nsenter), packet filters that cut
// it from chosen addresses, in one direction or both, or drop a share of
// its packets, and a token bucket that slows its link.
package composetest
