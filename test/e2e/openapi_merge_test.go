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
	var owns []ownIndex
	for _, name := range []string{"old", "new"} {
		a, _ := tb.Apiserver(name)
		own, _, _ := indexOf(t, c, a.URL(), tok)
		owns = append(owns, ownIndex{name, a.URL(), own})
		if hashOf(own.Paths[key].URL) == hashOf(idx.Paths[key].URL) {
			t.Errorf("the front names %s by the %s apiserver's hash: it did not merge", key, name)
		}
		// The skew is in the schemas themselves: each apiserver's own document lacks one resource.
		r, b := rawGet(t, c, a.URL()+own.Paths[key].URL, tok, "Accept", "application/json")
		if r.StatusCode != http.StatusOK || strings.Contains(string(b), "/"+vapResource) && strings.Contains(string(b), "/"+mapResource) {
			t.Errorf("the %s apiserver's own %s document (%d) has both resources: the testbed does not show the skew", name, key, r.StatusCode)
		}
	}

	// The whole index: every key of both apiservers, every document 200 with exactly the bytes of
	// its hash (the apiserver's own for a routed key), and exactly one merged: this group-version's.
	checkKeySet(t, "front's index", idx, owns)
	reads, merged, _ := checkDocuments(t, c, f.URL, tok, idx, owns, 1)
	if merged != 1 {
		t.Errorf("%d documents of the front's index are under a hash no apiserver publishes, want 1 (%s)", merged, key)
	}

	const rounds = 10
	figures := map[string]any{"rounds": rounds, "index_keys": len(idx.Paths), "document_reads": reads, "merged_documents": merged}
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
	established := time.Now()
	// Counted from the first attempt, no retry: the front lists the CRD's schema once skewgate has
	// refetched after every apiserver published it, which its refetch 2 s after the CRD's last change
	// (Established, here) does when they published by then, else its next poll. Explains started
	// before that may fail and are counted; every one started after it must succeed.
	crdKey := "apis/stable.example.com/v1"
	for _, a := range owns {
		for {
			own, _, _ := indexOf(t, c, a.url, tok)
			if u, ok := own.Paths[crdKey]; ok {
				if r, b := rawGet(t, c, a.url+u.URL, tok, "Accept", "application/json"); r.StatusCode == http.StatusOK && strings.Contains(string(b), "cronSpec") {
					break
				}
			}
			if time.Since(established) > time.Minute {
				t.Fatalf("the %s apiserver did not publish %s with the CRD's schema within a minute", a.name, crdKey)
			}
			time.Sleep(100 * time.Millisecond) // polling the apiserver
		}
	}
	apisPublished := time.Since(established)
	window := crdOpenAPILag + crdRefetchSlack
	if apisPublished > crdOpenAPILag {
		window = apisPublished + crdPollInterval + crdRefetchSlack
	}
	t.Logf("every apiserver published %s %v after the CRD was established; explains may fail for %v", crdKey, apisPublished.Round(time.Millisecond), window)
	var inWindow, inWindowFails, crdFails int
	var last string
	for after := 0; after < rounds; {
		start := time.Since(established)
		fails, l := explainLoop(t, kc, "crontabs.spec", "CronTab", "cronSpec", 1)
		if start < window {
			inWindow++
			inWindowFails += fails
			continue
		}
		after++
		if fails > 0 {
			crdFails++
			last = l
		}
	}
	t.Logf("kubectl explain crontabs through the front: %d of %d failed while skewgate may not have refetched, %d of %d after", inWindowFails, inWindow, crdFails, rounds)
	if crdFails > 0 {
		t.Errorf("kubectl explain crontabs through the front, started %v or more after the CRD was established: %d of %d failed (last: %s)", window, crdFails, rounds, last)
	}
	figures["crd_apiservers_published_after_established_ms"] = apisPublished.Milliseconds()
	figures["crd_explain_window_ms"] = window.Milliseconds()
	figures["crd_explain_in_window"] = map[string]int{"attempts": inWindow, "failures": inWindowFails}
	before, _, _ := indexOf(t, c, f.URL, tok)
	ownBefore := map[string]string{}
	for _, a := range owns {
		own, _, _ := indexOf(t, c, a.url, tok)
		ownBefore[a.name] = own.Paths[crdKey].URL
	}
	changed := time.Now()
	if out, stderr, err := kubectlApply(kc, crontabCRD("timezone"), "apply", "-f", "-"); err != nil {
		t.Fatalf("update CRD: %v %s %s", err, out, stderr)
	}
	applied := time.Now()
	// The front's own index must name the new document (a stale front index would still work
	// through the apiserver's 301, so kubectl alone cannot tell) within the bound its refetches
	// give, from when each apiserver itself published it (docs/openapi.md: skewgate refetches at
	// the CRD event and again 2 s later, and every 30 s).
	newDoc := func(base, u string) bool {
		r, b := rawGet(t, c, base+u, tok, "Accept", "application/json")
		return r.StatusCode == http.StatusOK && strings.Contains(string(b), "timezone")
	}
	apiPublished := map[string]time.Duration{} // apiserver -> since applied
	apiURL := map[string]string{}              // apiserver -> the URL its own index names for it
	var seen time.Duration                     // since applied
	var frontURL string
	// Both apiservers serve the whole CRD group-version, so the front routes its key to the newest
	// one's group under that one's hash: it names the new document once that apiserver has, maybe
	// before the other apiserver publishes it. The loop runs until the front and every apiserver have.
	for (seen == 0 || len(apiPublished) < len(owns)) && time.Since(applied) < 2*crdPollInterval { // past any bound below
		for _, a := range owns {
			if _, ok := apiPublished[a.name]; ok {
				continue
			}
			own, _, _ := indexOf(t, c, a.url, tok)
			if u := own.Paths[crdKey].URL; u != ownBefore[a.name] && newDoc(a.url, u) {
				apiPublished[a.name], apiURL[a.name] = time.Since(applied), u
			}
		}
		if seen == 0 {
			idx, _, _ := indexOf(t, c, f.URL, tok)
			if u := idx.Paths[crdKey].URL; u != before.Paths[crdKey].URL && newDoc(f.URL, u) {
				seen, frontURL = time.Since(applied), u
			}
		}
		if seen == 0 || len(apiPublished) < len(owns) {
			time.Sleep(100 * time.Millisecond) // polling the indexes
		}
	}
	var from time.Duration
	for _, a := range owns {
		d, ok := apiPublished[a.name]
		if !ok {
			t.Fatalf("the %s apiserver itself did not publish the CRD's new field within %v (the testbed is wrong)", a.name, time.Since(applied).Round(time.Millisecond))
		}
		from = max(from, d)
	}
	// The bound runs from when the first apiserver publishing the document the front names did
	// (from the last one, if the front names a document none of them does: a merge).
	first := time.Duration(-1)
	for name, u := range apiURL {
		if d := apiPublished[name]; u == frontURL && (first < 0 || d < first) {
			first = d
		}
	}
	if first >= 0 {
		from = first
	}
	// Published before the late refetch: that refetch finds it. Later: the next poll does.
	bound := crdOpenAPILag + crdRefetchSlack
	if from > crdOpenAPILag {
		bound = from + crdPollInterval + crdRefetchSlack
	}
	if seen == 0 || seen > bound {
		t.Errorf("the front's index named a %s document with the new field after %v (0: not within %v), want within %v: the apiservers published it %v after the change was applied",
			crdKey, seen.Round(time.Millisecond), time.Since(applied).Round(time.Millisecond), bound, apiPublished)
	} else if fails, last := explainLoop(t, kc, "crontabs.spec", "CronTab", "timezone", 1); fails > 0 {
		t.Errorf("kubectl explain crontabs.spec through the front after the change: %s", last)
	}
	apply := applied.Sub(changed)
	figures["crd_apply_ms"] = apply.Milliseconds()
	figures["crd_apiservers_published_ms"] = map[string]int64{"old": apiPublished["old"].Milliseconds(), "new": apiPublished["new"].Milliseconds()}
	figures["crd_new_field_seen_after_apply_ms"] = seen.Milliseconds()
	figures["crd_new_field_bound_after_apply_ms"] = bound.Milliseconds()
	seen += apply // README's figure counts from the change, kubectl's run included
	t.Logf("CRD: explain %d/%d failures; the front's index named the document with a new field after %v", crdFails, rounds, seen.Round(time.Millisecond))
	figures["crd_explain_failures"] = crdFails
	figures["crd_new_field_seen_ms"] = seen.Milliseconds()
	writeResults(t, &env{tb: tb, f: f}, figures)
}

// Bounds of the CRD change in TestScenarioOpenAPIMerged. crdOpenAPILag is discovery's openAPILag
// (discovery/controller.go: every worker refetches 2 s after the last CRD or APIService event) and
// crdPollInterval the --poll-interval the front runs with (serve/options' default, 30 s).
// crdRefetchSlack covers the watch event reaching skewgate after kubectl's apply returned, the
// refetch itself (version, /api, /apis, the index and the changed document from each apiserver) and
// one publish behind discovery's work queue (10 syncs a second).
const (
	crdOpenAPILag   = 2 * time.Second
	crdPollInterval = 30 * time.Second
	crdRefetchSlack = time.Second
)

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
