// Command etcd is the etcd server, built from the etcd module that Quire
// already depends on (go.etcd.io/etcd/server/v3), with etcd's own flags
// and behaviour: `etcd --data-dir … --listen-client-urls …`.
//
// It exists so that tests and images run the very etcd version that
// Quire's client and in-process test server are built against, as a
// separate process, without installing etcd: package proctest runs it
// beside the brokers and consumer processes, and it is the server of
// the etcd container image.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
