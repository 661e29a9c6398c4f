package flow

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/serve/options"
)

// The policy's refusal tells the operator which flags allow an address: every flag it names (in
// its log line and in the ignored Lease's hint) is one `skewgate serve` has (it once named
// --upstream-cidrs, which does not exist).
func TestAddressRefusalNamesServeFlags(t *testing.T) {
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	options.NewOptions().AddFlags(fs)

	renewed := metav1.NewMicroTime(time.Now())
	holder := "apiserver-x_0d1f"
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "apiserver-x", Namespace: discovery.LeaseNamespace,
		Labels:      map[string]string{"apiserver.kubernetes.io/identity": "kube-apiserver", discovery.HostnameLabel: "x"},
		Annotations: map[string]string{discovery.PeerAddressAnnotation: "10.9.9.9:6443"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, RenewTime: &renewed}}
	core, logs := observer.New(zap.WarnLevel)
	c, err := discovery.New(discovery.Config{Client: fake.NewClientset(l), Upstream: &rest.Config{}, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	topo := waitFor(t, c, 30*time.Second, "the Lease ignored", func(tp *discovery.Topology) bool { return len(tp.Ignored) == 1 })
	refusals := logs.FilterMessageSnippet("refused by the address policy").All()
	if len(refusals) != 1 {
		t.Fatalf("%d refusal log lines, want 1", len(refusals))
	}
	msg, _ := refusals[0].ContextMap()["error"].(string)
	if !strings.HasPrefix(msg, `address "10.9.9.9:6443": `) {
		t.Errorf("%q does not name the refused address", msg)
	}
	for what, text := range map[string]string{"log line": msg, "hint": topo.Ignored[0].Hint} {
		flags := regexp.MustCompile(`--[a-z][a-z0-9-]*`).FindAllString(text, -1)
		if !slices.Contains(flags, "--allowed-cidr") {
			t.Errorf("%s %q names %v, not --allowed-cidr", what, text, flags)
		}
		for _, f := range flags {
			if fs.Lookup(strings.TrimPrefix(f, "--")) == nil {
				t.Errorf("%s %q names %s, which skewgate serve does not have", what, text, f)
			}
		}
	}
}
