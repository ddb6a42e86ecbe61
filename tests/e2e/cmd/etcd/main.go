// etcd built from go.etcd.io/etcd/server/v3 at the version k8s.io/kubernetes
// v1.38.0-beta.0 itself requires; this is what upstream's etcd main does.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
