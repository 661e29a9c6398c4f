package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
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

func codeOf(err error) int {
	if err == nil {
		return http.StatusOK
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

func (r *recorder) add(op string, err error) { r.record(op, codeOf(err), err) }

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
// in place to v1.36.3 and new is restarted. No wrong 404, no lost write.
func TestScenarioRollingUpgrade(t *testing.T) {
	e := setup(t)
	cs := kubernetes.NewForConfigOrDie(e.tb.RESTConfig(e.f.URL, testbed.AdminByToken))
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
				rec.add("create configmap", err)
				if err == nil {
					mu.Lock()
					ackedCM = append(ackedCM, cm)
					mu.Unlock()
					_, err = cs.CoreV1().ConfigMaps("default").Get(rctx, cm, metav1.GetOptions{})
					rec.add("read back configmap", err)
				}
				mp := fmt.Sprintf("upgrade-%d-%d", w, i)
				_, err = cs.AdmissionregistrationV1().MutatingAdmissionPolicies().Create(rctx, mapObject(mp), metav1.CreateOptions{})
				rec.add("create "+mapResource, err)
				if err == nil {
					mu.Lock()
					ackedMAP = append(ackedMAP, mp)
					mu.Unlock()
					_, err = cs.AdmissionregistrationV1().MutatingAdmissionPolicies().Get(rctx, mp, metav1.GetOptions{})
					rec.add("read back "+mapResource, err)
				}
				_, err = cs.AdmissionregistrationV1().MutatingAdmissionPolicies().List(rctx, metav1.ListOptions{Limit: 5})
				rec.add("list "+mapResource, err)
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
	// Keep the clients going until a request after the restart has succeeded on the upgraded set.
	settled := time.Now()
	for {
		rctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := cs.AdmissionregistrationV1().MutatingAdmissionPolicies().List(rctx, metav1.ListOptions{Limit: 1})
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
	codes := make([]int, 0, len(byCode))
	for c := range byCode {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	report := ""
	for _, c := range codes {
		report += fmt.Sprintf(" %d:%d", c, byCode[c])
	}
	t.Logf("rolling upgrade through the front (%s): %d requests, answers by status%s (0 = transport error); non-2xx window %v",
		e.f.DataPlane, len(rec.out), report, window.Round(time.Millisecond))
	for _, o := range notFound {
		t.Errorf("wrong 404 at %s on %s: %v", o.at.Format(time.StampMilli), o.op, o.err)
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
	t.Logf("acknowledged writes: %d configmaps, %d %s, all readable", len(ackedCM), len(ackedMAP), mapResource)
	if len(ackedMAP) == 0 || len(ackedCM) == 0 {
		t.Errorf("no write was acknowledged: the scenario proves nothing")
	}
}

// TestScenarioKillNew is scenario 5: SIGKILL of the only apiserver serving the skewed API answers 503
// (never 404) until it is back; after its /readyz, requests succeed again.
func TestScenarioKillNew(t *testing.T) {
	e := setup(t)
	// A plain HTTP client: client-go would silently retry a 503 with Retry-After, hiding what the
	// front answers.
	c := httpsClient(t, e.tb, nil)
	var rec recorder
	list := func() (int, error) {
		code, body, err := do(t, c, http.MethodGet, e.f.URL+"/apis/"+mapGroup+"/v1/"+mapResource+"?limit=1", testbed.AdminToken)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("%d: %.200s", code, body)
		}
		rec.record("list "+mapResource, code, err)
		return code, err
	}
	if _, err := list(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if err := e.tb.Kill("new"); err != nil {
		t.Fatal(err)
	}
	// Until new is back: every answer must be 503 (or 200 from a request that raced the kill).
	var first503 time.Duration
	for n := 0; n < 20; {
		if time.Since(killed) > time.Minute {
			t.Fatalf("no 20 answers of 503 within a minute of SIGKILL: %v", rec.out)
		}
		if code, err := list(); code == http.StatusServiceUnavailable {
			if n == 0 {
				first503 = time.Since(killed)
			}
			n++
		} else if code != http.StatusOK && code != 0 {
			t.Fatalf("after SIGKILL: %d %v, want 503", code, err)
		}
		time.Sleep(20 * time.Millisecond) // pacing the client loop
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := e.tb.Start(ctx, "new"); err != nil {
		t.Fatal(err)
	}
	back := time.Now() // its /readyz answered 200
	for code, _ := list(); code != http.StatusOK; code, _ = list() {
		if time.Since(back) > 30*time.Second {
			t.Fatal("the skewed API never came back through the front")
		}
		time.Sleep(20 * time.Millisecond)
	}
	recovered := time.Since(back)
	byCode, notFound, window := rec.summary()
	t.Logf("SIGKILL of new (%s): first 503 after %v; answers by status %v; non-2xx window %v; /readyz to success %v",
		e.f.DataPlane, first503.Round(time.Millisecond), byCode, window.Round(time.Millisecond), recovered.Round(time.Millisecond))
	for _, o := range notFound {
		t.Errorf("wrong 404 at %s: %v", o.at.Format(time.StampMilli), o.err)
	}
	if recovered > 2*time.Second {
		t.Errorf("took %v after new's /readyz to serve again, want under 2s", recovered)
	}
}
