package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/skewgate/skewgate/test/testbed"
)

func mapObject(name string) *admissionregistrationv1.MutatingAdmissionPolicy {
	never := admissionregistrationv1.NeverReinvocationPolicy
	return &admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}},
				},
			}}},
			ReinvocationPolicy: never,
			Mutations: []admissionregistrationv1.Mutation{{
				PatchType:          admissionregistrationv1.PatchTypeApplyConfiguration,
				ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{Expression: "Object{}"},
			}},
		},
	}
}

// outcome is one request's result during a disruption.
type outcome struct {
	at   time.Time
	op   string
	code int // HTTP status; 0 for a transport error
	err  error
}

// codeOf is the HTTP status a client-go call ended with: ok when it succeeded, the status of an API
// error, 0 for anything else (a transport error or a timeout).
func codeOf(ok int, err error) int {
	if err == nil {
		return ok
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		return int(st.Status().Code)
	}
	return 0
}

// recorder collects outcomes from concurrent clients.
type recorder struct {
	mu  sync.Mutex
	out []outcome
}

func (r *recorder) add(op string, ok int, err error) { r.record(op, codeOf(ok, err), err) }

// record adds an outcome whose HTTP status is known (0: transport error).
func (r *recorder) record(op string, code int, err error) {
	r.mu.Lock()
	r.out = append(r.out, outcome{at: time.Now(), op: op, code: code, err: err})
	r.mu.Unlock()
}

// summary counts outcomes by code and measures the span of non-2xx answers.
func (r *recorder) summary() (byCode map[int]int, notFound []outcome, failWindow time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	byCode = map[int]int{}
	var first, last time.Time
	for _, o := range r.out {
		byCode[o.code]++
		if o.code == http.StatusNotFound {
			notFound = append(notFound, o)
		}
		if o.code != http.StatusOK && o.code != http.StatusCreated {
			if first.IsZero() {
				first = o.at
			}
			last = o.at
		}
	}
	if !first.IsZero() {
		failWindow = last.Sub(first)
	}
	return byCode, notFound, failWindow
}

// byStatus formats counts by status in ascending order of status.
func byStatus(m map[int]int) string {
	out := ""
	for _, c := range slices.Sorted(maps.Keys(m)) {
		out += fmt.Sprintf(" %d:%d", c, m[c])
	}
	return strings.TrimSpace(out)
}

// logDistinctErrors logs each distinct failure once, with how often and when it was first seen.
func (r *recorder) logDistinctErrors(t *testing.T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	type seen struct {
		n     int
		first time.Time
	}
	m := map[string]*seen{}
	var keys []string
	for _, o := range r.out {
		if o.err == nil {
			continue
		}
		k := fmt.Sprintf("%s: %d %v", o.op, o.code, o.err)
		if m[k] == nil {
			m[k] = &seen{first: o.at}
			keys = append(keys, k)
		}
		m[k].n++
	}
	for _, k := range keys {
		t.Logf("%5d x (first %s) %s", m[k].n, m[k].first.Format(time.StampMilli), k)
	}
}

// TestScenarioRollingUpgrade is scenario 4: reads and writes through the front while old is upgraded
// in place to v1.36.3 and new is restarted. Every call the clients make succeeds (client-go retries
// the front's 503s with Retry-After itself: those are counted separately, on the wire), no answer
// is a 404, no acknowledged write is lost. README states more: the only other answers on the wire
// were 503s with Retry-After: 1 for requests no apiserver ran, which client-go retried. Every
// exchange is therefore 200, 201 or such a 503, each checked by its body and header: Envoy's own
// local reply for a request it never sent (a metav1.Status carrying Envoy's response code details
// of UH, UF or NC), or an apiserver's own refusal while it shuts down ("apiserver is shutting
// down", answered before any handler ran). A 503 of skewgate's (a resource no ready apiserver
// serves) or any other fails the test.
func TestScenarioRollingUpgrade(t *testing.T) {
	e := setup(t)
	var onWire statusCounts
	cfg := e.tb.RESTConfig(e.f.URL, testbed.AdminByToken)
	cfg.WrapTransport = onWire.wrap
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx, stop := context.WithCancel(context.Background())
	var rec recorder
	var mu sync.Mutex
	var ackedCM, ackedMAP []string
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				cm := fmt.Sprintf("upgrade-%d-%d", w, i)
				_, err := cs.CoreV1().ConfigMaps("default").Create(rctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cm}, Data: map[string]string{"i": cm}}, metav1.CreateOptions{})
				rec.add("create configmap", http.StatusCreated, err)
				if err == nil {
					mu.Lock()
					ackedCM = append(ackedCM, cm)
					mu.Unlock()
					_, err = cs.CoreV1().ConfigMaps("default").Get(rctx, cm, metav1.GetOptions{})
					rec.add("read back configmap", http.StatusOK, err)
				}
				mp := fmt.Sprintf("upgrade-%d-%d", w, i)
				_, err = cs.AdmissionregistrationV1().MutatingAdmissionPolicies().Create(rctx, mapObject(mp), metav1.CreateOptions{})
				rec.add("create "+mapResource, http.StatusCreated, err)
				if err == nil {
					mu.Lock()
					ackedMAP = append(ackedMAP, mp)
					mu.Unlock()
					_, err = cs.AdmissionregistrationV1().MutatingAdmissionPolicies().Get(rctx, mp, metav1.GetOptions{})
					rec.add("read back "+mapResource, http.StatusOK, err)
				}
				_, err = cs.AdmissionregistrationV1().MutatingAdmissionPolicies().List(rctx, metav1.ListOptions{Limit: 5})
				rec.add("list "+mapResource, http.StatusOK, err)
				cancel()
			}
		}()
	}

	uctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	if err := e.tb.Replace(uctx, "old", testbed.NewVersion); err != nil {
		t.Fatal(err)
	}
	t.Logf("old replaced by %s after %v", testbed.NewVersion, time.Since(start).Round(time.Millisecond))
	if err := e.tb.Stop("new"); err != nil {
		t.Fatal(err)
	}
	if err := e.tb.Start(uctx, "new"); err != nil {
		t.Fatal(err)
	}
	t.Logf("new restarted after %v", time.Since(start).Round(time.Millisecond))
	// Keep the clients going until a request after the restart has succeeded on the upgraded set
	// (a probe of its own, outside the counts).
	probe := kubernetes.NewForConfigOrDie(e.tb.RESTConfig(e.f.URL, testbed.AdminByToken))
	settled := time.Now()
	for {
		rctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := probe.AdmissionregistrationV1().MutatingAdmissionPolicies().List(rctx, metav1.ListOptions{Limit: 1})
		c()
		if err == nil && time.Since(settled) > 2*time.Second {
			break
		}
		if time.Since(settled) > time.Minute {
			t.Fatalf("the front never served again after the upgrade: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // pacing the probe loop
	}
	stop()
	wg.Wait()

	byCode, notFound, window := rec.summary()
	exchanges, replies := onWire.snapshot()
	t.Logf("rolling upgrade through the front (%s): %d calls, outcomes by status %s (0 = transport error); on the wire %s; non-2xx window %v",
		e.f.DataPlane, len(rec.out), byStatus(byCode), byStatus(exchanges), window.Round(time.Millisecond))
	for _, o := range notFound {
		t.Errorf("wrong 404 at %s on %s: %v", o.at.Format(time.StampMilli), o.op, o.err)
	}
	for code, n := range byCode {
		if code != http.StatusOK && code != http.StatusCreated {
			t.Errorf("%d calls ended with status %d (0 = transport error), want every call answered 200/201", n, code)
		}
	}
	if n := exchanges[http.StatusNotFound]; n != 0 {
		t.Errorf("%d answers on the wire were 404", n)
	}
	for code, n := range exchanges {
		if code != http.StatusOK && code != http.StatusCreated && code != http.StatusServiceUnavailable {
			t.Errorf("%d HTTP exchanges ended with status %d (0 = transport error), want only 200, 201 and Envoy's own 503s", n, code)
		}
	}
	byKind := map[string]int{}
	for _, r := range replies {
		byKind[r.Kind]++
		t.Logf("503 on the wire: %s: %s (reason %q, Retry-After %q): %s", r.Op, r.Kind, r.Reason, r.RetryAfter, r.Message)
		if r.Kind != neverSentKind && r.Kind != shuttingDownKind || r.RetryAfter != "1" {
			t.Errorf("a 503 on the wire (%s) was %s with Retry-After %q: %s; want Retry-After: 1 and Envoy's own reply for a request it never sent or an apiserver's refusal while shutting down",
				r.Op, r.Kind, r.RetryAfter, r.Message)
		}
	}
	rec.logDistinctErrors(t)

	// Every acknowledged write is readable, directly from an apiserver.
	direct := kubernetes.NewForConfigOrDie(e.tb.RESTConfig(e.tb.MustApiserver("new").URL(), testbed.AdminByToken))
	rctx, c := context.WithTimeout(context.Background(), time.Minute)
	defer c()
	for _, cm := range ackedCM {
		if _, err := direct.CoreV1().ConfigMaps("default").Get(rctx, cm, metav1.GetOptions{}); err != nil {
			t.Errorf("acknowledged configmap %s lost: %v", cm, err)
		}
	}
	for _, mp := range ackedMAP {
		if _, err := direct.AdmissionregistrationV1().MutatingAdmissionPolicies().Get(rctx, mp, metav1.GetOptions{}); err != nil {
			t.Errorf("acknowledged %s %s lost: %v", mapResource, mp, err)
		}
	}
	t.Logf("acknowledged writes: %d configmaps, %d %s", len(ackedCM), len(ackedMAP), mapResource)
	if len(ackedMAP) == 0 || len(ackedCM) == 0 {
		t.Errorf("no write was acknowledged: the scenario proves nothing")
	}
	writeResults(t, e, map[string]any{
		"calls":                       len(rec.out),
		"calls_by_status":             byCode,
		"http_exchanges_by_status":    exchanges,
		"http_503_by_kind":            byKind,
		"http_503":                    replies,
		"non_2xx_window_ms":           window.Milliseconds(),
		"acknowledged_configmaps":     len(ackedCM),
		"acknowledged_" + mapResource: len(ackedMAP),
		"note":                        "status 0 = transport error; calls are what client-go returned, exchanges include the 503s client-go retried",
	})
}
