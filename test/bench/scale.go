package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/test/synthetic"
	"github.com/skewgate/skewgate/xds"
)

type scaleResult struct {
	Upstreams   int     `json:"upstreams"`
	GVRs        int     `json:"gvrs"`
	Sets        int     `json:"sets"`
	Clusters    int     `json:"clusters"`
	BuildMs     float64 `json:"buildMs"`
	TranslateMs float64 `json:"translateMs"`
	SnapshotKiB int     `json:"snapshotKiB"`
	RSSMiB      int     `json:"rssMiB"`
}

func setsFor(n int) int {
	switch {
	case n <= 10:
		return 2
	case n <= 100:
		return 5
	}
	return 10
}

// measureScale runs in a fresh process (scale-child) so its RSS is the control plane's alone.
func measureScale(n int) scaleResult {
	r := scaleResult{Upstreams: n, GVRs: 600, Sets: setsFor(n)}
	facts := synthetic.Facts(n, r.GVRs, r.Sets)
	const rounds = 5
	var top *discovery.Topology
	start := time.Now()
	for range rounds {
		top = discovery.Build("scale", time.Now(), facts)
	}
	r.BuildMs = float64(time.Since(start).Microseconds()) / 1000 / rounds
	o := xds.Options{ServingCertFile: "/f.crt", ServingKeyFile: "/f.key", UpstreamCAFile: "/ca.crt", FrontProxyCertFile: "/fp.crt", FrontProxyKeyFile: "/fp.key", ExtProcAddress: "127.0.0.1:18001"}
	var rs *xds.Resources
	start = time.Now()
	for range rounds {
		var err error
		if rs, err = xds.Translate(top, o); err != nil {
			fatal(err)
		}
	}
	r.TranslateMs = float64(time.Since(start).Microseconds()) / 1000 / rounds
	size := 0
	for _, c := range rs.Clusters {
		size += proto.Size(c)
	}
	for _, l := range rs.Listeners {
		size += proto.Size(l)
	}
	for _, rc := range rs.Routes {
		size += proto.Size(rc)
	}
	r.Clusters, r.SnapshotKiB = len(rs.Clusters), size/1024
	runtime.GC()
	r.RSSMiB = rssMiB()
	runtime.KeepAlive(top)
	runtime.KeepAlive(rs)
	return r
}

func rssMiB() int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.Atoi(f[1])
			return kb / 1024
		}
	}
	return -1
}

func scaleInChild(n int) (scaleResult, error) {
	out, err := exec.Command(os.Args[0], "--scale-child", strconv.Itoa(n)).Output()
	if err != nil {
		return scaleResult{}, fmt.Errorf("scale %d: %w", n, err)
	}
	var r scaleResult
	return r, json.Unmarshal(out, &r)
}
