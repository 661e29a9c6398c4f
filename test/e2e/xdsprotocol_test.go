package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/skewgate/skewgate/test/dataplane"
	"github.com/skewgate/skewgate/test/front"
	"github.com/skewgate/skewgate/test/testbed"
)

// Terms of startBound, the most a data plane may take from its start beside a skewgate that has
// published to the first 200 through its front.
const (
	// startXDSSlack covers the ADS exchanges up to a serving listener on the node's unix socket:
	// CDS, the clusters' SDS secrets, LDS, RDS and the listener's SDS secrets, each answered at
	// once from the published snapshot, with their ACKs (ten messages), the secrets' file reads and
	// the listener's listen().
	startXDSSlack = 500 * time.Millisecond
	// startHealthRounds: the clusters initialize after one health check of every host, which starts
	// at once and ends within its timeout (the probe interval); a host whose first check failed (an
	// apiserver slow to answer on a loaded machine) passes on the next, one interval later.
	startHealthRounds = 3
	// startPoll is the pause between two requests through the front.
	startPoll = 20 * time.Millisecond
	// startGiveUp ends the wait when the front never serves; far past the bound, so a slow start is
	// measured rather than cut off, and past Envoy's SDS initial_fetch_timeout (15 s unset), which a
	// control plane that withholds secrets would make every start wait.
	startGiveUp = 25 * time.Second
)

// startBound is the most a start may take: startXDSSlack + startHealthRounds probe intervals +
// startPoll + how long the successful request took (measured: ext_proc and the apiserver's answer
// depend on the machine's load, not on the start).
func startBound(probe, request time.Duration) time.Duration {
	return startXDSSlack + startHealthRounds*probe + startPoll + request
}

// TestDataPlaneStartsOverSotWAndDelta: a data plane that starts beside a skewgate which has
// published serves within startBound, over state-of-the-world ADS as over delta. Over SotW, Envoy
// asks for the secrets its clusters name before it has a listener and for the listener's after it
// (test/dataplane's TestSotWSecretsInEnvoysOrder); a control plane that answers an SDS request only
// when it names every secret of the snapshot (go-control-plane's cache in ADS mode) leaves the
// clusters waiting for their secrets, Envoy until initial_fetch_timeout on every start, the test
// data plane for ever.
func TestDataPlaneStartsOverSotWAndDelta(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: needs the testbed binaries (make testbed-bins)")
	}
	tb := testbed.StartT(t, testbed.Config{Apiservers: []testbed.ApiserverSpec{{Name: "old", Version: testbed.OldVersion}}})
	tc, err := tb.TLSConfig(testbed.CertPair{})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range []dataplane.Protocol{dataplane.SotW, dataplane.Delta} {
		t.Run(string(p), func(t *testing.T) {
			probe := 200 * time.Millisecond
			n, err := front.NewNode(tb, front.NodeOptions{Dir: t.TempDir(), Errorf: t.Errorf, Apiserver: "old", Host: 20 + i, ProbeInterval: probe,
				XDSProtocol: p, Logger: zaptest.NewLogger(t).Named("skewgate"), Logf: t.Logf})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(n.Close)
			if err := n.StartSkewgate(); err != nil {
				t.Fatal(err)
			}
			waitPublished(t, n)

			client := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 2 * time.Second}
			t.Cleanup(client.CloseIdleConnections)
			started := time.Now()
			if _, err := n.StartDataPlane(); err != nil {
				t.Fatal(err)
			}
			var last string
			for {
				sent := time.Now()
				code, err := readyzThrough(client, n.URL)
				took := time.Since(sent)
				if code == http.StatusOK {
					elapsed := time.Since(started)
					bound := startBound(probe, took)
					t.Logf("%s: 200 through the front %v after the data plane started (bound %v, the request took %v)", p, elapsed.Round(time.Millisecond), bound.Round(time.Millisecond), took.Round(time.Millisecond))
					if elapsed > bound {
						t.Errorf("%s: the front served %v after the data plane started, past the bound %v", p, elapsed.Round(time.Millisecond), bound.Round(time.Millisecond))
					}
					return
				}
				if err != nil {
					last = err.Error()
				} else {
					last = http.StatusText(code)
				}
				if time.Since(started) > startGiveUp {
					t.Fatalf("%s: no 200 through the front %v after the data plane started (last: %s)", p, startGiveUp, last)
				}
				time.Sleep(startPoll)
			}
		})
	}
}

// waitPublished waits until n's skewgate published a snapshot of a Topology in which its local
// apiserver is proven and ready, so that the data plane starts against the configuration it serves.
func waitPublished(t *testing.T, n *front.Node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := n.Skewgate()
	for {
		top := srv.Discovery.Current()
		if srv.Ready() && top != nil && len(top.Upstreams) == 1 && top.Upstreams[0].Ready {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("skewgate of node %s published no Topology with its apiserver ready", n.Name)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// readyzThrough sends GET /readyz through the front at url as the admin (by token).
func readyzThrough(c *http.Client, url string) (int, error) {
	req, _ := http.NewRequest(http.MethodGet, url+"/readyz", nil)
	req.Header.Set("Authorization", "Bearer "+testbed.AdminToken)
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
