package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/skewgate/skewgate/test/front"
	"github.com/skewgate/skewgate/test/testbed"
)

// vapResource is served by v1.35 and v1.36 alike, unless switched off.
const vapResource = "validatingadmissionpolicies"

// TestScenarioOpenAPIMerged: no apiserver serves every resource of admissionregistration.k8s.io/v1.
// The v1.36 apiserver runs with validatingadmissionpolicies (and their bindings, and their admission
// plugin) switched off by --runtime-config, so it serves mutatingadmissionpolicies but not validatingadmissionpolicies, and
// the v1.35 one the other way round, as when a new release drops a resource of a group-version the
// old one still serves. The front serves a document it merged from both: `kubectl explain` finds
// both resources through the front, every time; the round-robin control fails for each whenever it
// reads a document (or discovery) from the apiserver without it. Also a CRD: explain finds its schema
// through the front, and a field added to it shows within a bound.
func TestScenarioOpenAPIMerged(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: needs the testbed binaries (make testbed-bins)")
	}
	off := "--runtime-config=" + mapGroup + "/v1/" + vapResource + "=false," + mapGroup + "/v1/validatingadmissionpolicybindings=false"
	tb := testbed.StartT(t, testbed.Config{Apiservers: []testbed.ApiserverSpec{
		{Name: "old", Version: testbed.OldVersion},
		{Name: "new", Version: testbed.NewVersion, ExtraFlags: []string{off,
			// Its admission plugin waits for informers of the switched-off API and would hold the
			// apiserver not ready forever.
			"--disable-admission-plugins=ValidatingAdmissionPolicy"}},
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	f, err := front.Start(ctx, tb, front.Options{Dir: t.TempDir(), Errorf: t.Errorf, Logger: zaptest.NewLogger(t).Named("skewgate"), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	logDataPlane(t, f)
	c := noRedirects(httpsClient(t, tb, nil))
	tok := testbed.AdminToken
	key := "apis/" + mapGroup + "/v1"

	// The merged document: under the hash the front's index names, with the paths of both.
	var idx openapiIndex
	var doc []byte
	deadline := time.Now().Add(30 * time.Second)
	for {
		idx, _, _ = indexOf(t, c, f.URL, tok)
		r, b := rawGet(t, c, f.URL+idx.Paths[key].URL, tok, "Accept", "application/json")
		doc = b
		if r.StatusCode == http.StatusOK && strings.Contains(string(b), "/"+vapResource) && strings.Contains(string(b), "/"+mapResource) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the front never served a document of %s with both %s and %s (last: %d, %d bytes)", key, vapResource, mapResource, r.StatusCode, len(b))
		}
		time.Sleep(500 * time.Millisecond)
	}
	if h := hashOf(idx.Paths[key].URL); sha512Hex(doc) != h {
		t.Errorf("merged %s: the body's SHA-512 is %.16s…, the index names %.16s…", key, sha512Hex(doc), h)
	}
	for _, name := range []string{"old", "new"} {
		a, _ := tb.Apiserver(name)
		own, _, _ := indexOf(t, c, a.URL(), tok)
		if hashOf(own.Paths[key].URL) == hashOf(idx.Paths[key].URL) {
			t.Errorf("the front names %s by the %s apiserver's hash: it did not merge", key, name)
		}
		// The skew is in the schemas themselves: each apiserver's own document lacks one resource.
		r, b := rawGet(t, c, a.URL()+own.Paths[key].URL, tok, "Accept", "application/json")
		if r.StatusCode != http.StatusOK || strings.Contains(string(b), "/"+vapResource) && strings.Contains(string(b), "/"+mapResource) {
			t.Errorf("the %s apiserver's own %s document (%d) has both resources: the testbed does not show the skew", name, key, r.StatusCode)
		}
	}

	const rounds = 10
	figures := map[string]any{"rounds": rounds}
	for _, r := range []struct{ resource, kind string }{{mapResource, "MutatingAdmissionPolicy"}, {vapResource, "ValidatingAdmissionPolicy"}} {
		fails, last := explainLoop(t, f.Kubeconfig(testbed.AdminByToken), r.resource+".spec", r.kind, "FIELD", rounds)
		if fails > 0 {
			t.Errorf("kubectl explain %s through the front: %d of %d failed (last: %s)", r.resource, fails, rounds, last)
		}
		control, lastControl := explainLoop(t, f.RoundRobinKubeconfig(testbed.AdminByToken), r.resource+".spec", r.kind, "FIELD", rounds)
		t.Logf("kubectl explain %s.spec: %d/%d failures through skewgate, %d/%d through round-robin (last: %s)", r.resource, fails, rounds, control, rounds, lastControl)
		if control == 0 {
			t.Errorf("the round-robin control never failed to explain %s in %d rounds: the testbed does not show the skew", r.resource, rounds)
		}
		figures[r.resource] = map[string]int{"front_failures": fails, "round_robin_failures": control}
	}

	// A CRD: explain through the front, then a new field, seen within the bound.
	kc := f.Kubeconfig(testbed.AdminByToken)
	if out, stderr, err := kubectlApply(kc, crontabCRD(""), "apply", "-f", "-"); err != nil {
		t.Fatalf("create CRD: %v %s %s", err, out, stderr)
	}
	mustKubectl(t, kc, "wait", "--for=condition=Established", "--timeout=60s", "crd/crontabs.stable.example.com")
	deadline = time.Now().Add(30 * time.Second)
	for {
		fails, _ := explainLoop(t, kc, "crontabs.spec", "CronTab", "cronSpec", 1)
		if fails == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	crdFails, last := explainLoop(t, kc, "crontabs.spec", "CronTab", "cronSpec", rounds)
	if crdFails > 0 {
		t.Errorf("kubectl explain crontabs through the front: %d of %d failed (last: %s)", crdFails, rounds, last)
	}
	crdKey := "apis/stable.example.com/v1"
	before, _, _ := indexOf(t, c, f.URL, tok)
	changed := time.Now()
	if out, stderr, err := kubectlApply(kc, crontabCRD("timezone"), "apply", "-f", "-"); err != nil {
		t.Fatalf("update CRD: %v %s %s", err, out, stderr)
	}
	// The apiservers publish a CRD's schema about a second after the change; skewgate refetches at
	// once and two seconds later. 15 s is that plus slack, half the 30 s poll: the front's own index
	// must name the new document by then (a stale front index would still work through the
	// apiserver's 301, so kubectl alone cannot tell).
	const bound = 15 * time.Second
	var seen time.Duration
	for seen == 0 && time.Since(changed) < bound {
		idx, _, _ := indexOf(t, c, f.URL, tok)
		if u := idx.Paths[crdKey].URL; u != before.Paths[crdKey].URL {
			if r, b := rawGet(t, c, f.URL+u, tok, "Accept", "application/json"); r.StatusCode == http.StatusOK && strings.Contains(string(b), "timezone") {
				seen = time.Since(changed)
			}
		}
		if seen == 0 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if seen == 0 {
		t.Errorf("the front's index did not name a %s document with the new field within %v", crdKey, bound)
	} else if fails, last := explainLoop(t, kc, "crontabs.spec", "CronTab", "timezone", 1); fails > 0 {
		t.Errorf("kubectl explain crontabs.spec through the front after the change: %s", last)
	}
	t.Logf("CRD: explain %d/%d failures; the front's index named the document with a new field after %v", crdFails, rounds, seen.Round(time.Millisecond))
	figures["crd_explain_failures"] = crdFails
	figures["crd_new_field_seen_ms"] = seen.Milliseconds()
	writeResults(t, &env{tb: tb, f: f}, figures)
}

// crontabCRD is a CRD with one version; extra names one more string field of its spec.
func crontabCRD(extra string) string {
	field := ""
	if extra != "" {
		field = "\n              " + extra + ": {type: string}"
	}
	return `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: crontabs.stable.example.com
spec:
  group: stable.example.com
  scope: Namespaced
  names: {plural: crontabs, singular: crontab, kind: CronTab}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              cronSpec: {type: string}
              image: {type: string}` + field + "\n"
}
