// Command etcd is the etcd server, built from go.etcd.io/etcd/server/v3 so
// that no release tarball has to be downloaded.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
