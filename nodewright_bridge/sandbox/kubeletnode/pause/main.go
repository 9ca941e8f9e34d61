// Command nwb-pause holds a pod sandbox's namespaces for the kubelet tier of the sandbox, as the
// upstream pause image does: it waits for SIGTERM or SIGINT and reaps orphaned children (it is
// PID 1 of a pod that shares its process namespace). Built next to the tier's binaries because
// the sandbox cannot pull the upstream pause image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for received := range signals {
		if received != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
