package options

import (
	"errors"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/skewgate/skewgate/internal/grpcutil"
)

var validArgs = []string{
	"--kubeconfig=/etc/skewgate/kubeconfig",
	"--static-upstream=cp-1=10.0.0.1:6443",
	"--allowed-cidr=10.0.0.0/24",
	"--front-cert-file=/pki/front.crt", "--front-key-file=/pki/front.key",
	"--envoy-upstream-ca-file=/pki/ca.crt",
	"--front-proxy-cert-file=/pki/fp.crt", "--front-proxy-key-file=/pki/fp.key",
}

// parse parses validArgs then extra as `skewgate serve` does and returns the parse error or the
// validation errors.
func parse(t *testing.T, extra ...string) (*Options, error) {
	t.Helper()
	o := NewOptions()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	fs.SetOutput(&strings.Builder{})
	o.AddFlags(fs)
	if err := fs.Parse(append(append([]string{}, validArgs...), extra...)); err != nil {
		return o, err
	}
	o.Complete()
	return o, errors.Join(o.Validate()...)
}

// badValues holds, for every flag of `skewgate serve`, values it must refuse: each error must name
// the flag and the value (want, when set, is what the error names instead of flag=value).
var badValues = map[string][]struct{ value, want string }{
	"kubeconfig":                  {{"", "--kubeconfig is required"}},
	"static-upstream":             {{"cp-1:6443", ""}, {"cp-1=", ""}},
	"allowed-cidr":                {{"10.0.0.0/33", ""}, {"ten", ""}},
	"lease-stale-after":           {{"0s", ""}, {"-30s", ""}, {"10s", ""}, {"2h", ""}},
	"probe-interval":              {{"0s", ""}, {"-1s", ""}, {"50ms", ""}, {"2m", ""}},
	"poll-interval":               {{"0s", ""}, {"500ms", ""}, {"2h", ""}},
	"max-upstreams":               {{"0", ""}, {"-1", ""}, {"1001", ""}},
	"xds-listen":                  {{"0.0.0.0:18000", ""}, {"unix://run/x.sock", ""}, {"18000", ""}, {"", "--xds-listen is required"}, {"127.0.0.1:18000", "--grpc-plaintext-loopback"}},
	"extproc-listen":              {{"10.0.0.5:18001", ""}, {"127.0.0.1:99999", ""}, {"[::1]:18001", "--grpc-plaintext-loopback"}},
	"grpc-peer-uid":               {{"4294967295", ""}, {"-1", ""}},
	"http-listen":                 {{"unix:///run/skewgate/http.sock", ""}, {"18080", ""}, {"127.0.0.1:", ""}},
	"grpc-cert-file":              {{"/x/tls.crt", ""}},
	"grpc-key-file":               {{"/x/tls.key", ""}},
	"grpc-client-ca-file":         {{"/x/ca.crt", ""}},
	"cluster-grace":               {{"-1s", ""}, {"25h", ""}},
	"front-address":               {{"example.com", ""}, {"", "--front-address=: not an IP"}},
	"front-port":                  {{"0", ""}, {"70000", ""}, {"-1", ""}},
	"front-cert-file":             {{"front.crt", ""}, {"", "--front-cert-file is required"}},
	"front-key-file":              {{"/keys/front.key", ""}, {"", "--front-key-file is required"}},
	"front-client-ca-file":        {{"pki/ca.crt", ""}},
	"envoy-upstream-ca-file":      {{"ca.crt", ""}, {"", "--envoy-upstream-ca-file is required"}},
	"front-proxy-cert-file":       {{"fp.crt", ""}, {"", "--front-proxy-cert-file is required"}},
	"front-proxy-key-file":        {{"/keys/fp.key", ""}},
	"envoy-extproc-address":       {{"10.0.0.5:18001", ""}, {"unix://x.sock", ""}, {"localhost:18001", "--grpc-plaintext-loopback"}},
	"envoy-extproc-ca-file":       {{"/e/ca.crt", ""}},
	"envoy-extproc-cert-file":     {{"/e/tls.crt", ""}},
	"envoy-extproc-key-file":      {{"/e/tls.key", ""}},
	"envoy-extproc-sni":           {{"not a name", ""}, {"-bad-.example", ""}},
	"extproc-timeout":             {{"0s", ""}, {"-1ms", ""}, {"11s", ""}, {"1h", ""}},
	"health-check-interval":       {{"0s", ""}, {"-1s", ""}, {"50ms", ""}, {"2m", ""}},
	"log-format":                  {{"xml", ""}},
	"kubernetes-endpoints":        {{"true", "--kubernetes-endpoint-address"}},
	"kubernetes-endpoint-address": {{"127.0.0.1", ""}, {"169.254.0.1", ""}, {"0.0.0.0", ""}, {"2001:db8::1", ""}, {"cp1", ""}},
	"kubernetes-endpoints-ttl":    {{"0s", ""}, {"4s", ""}, {"6m", ""}},
	"kubernetes-endpoints-member": {{"CP_1", ""}, {"-x", ""}},
	"log-level":                   {{"verbose", ""}, {"", ""}},
}

// goodOnly are flags with no invalid value (a boolean that is safe either way).
var goodOnly = map[string]string{
	"trust-endpointslice":     "either value is safe",
	"grpc-plaintext-loopback": "only relaxes the loopback rule of --xds-listen, --extproc-listen and --envoy-extproc-address, tested there",
	"upstream-ca-file":        "any file (empty: the kubeconfig's CA); read when the first client is built",
	"forward-certificate-uid": "either value is safe: off refuses certificates with a UID, on forwards it (xds and test/identity test both)",
}

func TestOptionsValidate(t *testing.T) {
	if _, err := parse(t); err != nil {
		t.Fatalf("valid options refused: %v", err)
	}
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	NewOptions().AddFlags(fs)
	fs.VisitAll(func(f *pflag.Flag) {
		if _, ok := badValues[f.Name]; !ok && goodOnly[f.Name] == "" && f.Name != "pprof" {
			t.Errorf("--%s has no invalid value in the table", f.Name)
		}
	})
	for flag, cases := range badValues {
		for _, c := range cases {
			_, err := parse(t, "--"+flag+"="+c.value)
			want := c.want
			if want == "" {
				want = "--" + flag + "=" + c.value
			}
			if err == nil {
				t.Errorf("--%s=%q accepted", flag, c.value)
			} else if !strings.Contains(err.Error(), want) && !strings.Contains(err.Error(), `"`+c.value+`" for "--`+flag+`"`) {
				t.Errorf("--%s=%q: error does not name %q:\n%v", flag, c.value, want, err)
			}
		}
	}
}

// TestOptionsValidateRelations: rules between flags, each naming both.
func TestOptionsValidateRelations(t *testing.T) {
	for name, c := range map[string]struct {
		args []string
		want []string
	}{
		"stale not above probe":     {[]string{"--lease-stale-after=30s", "--probe-interval=30s"}, []string{"--lease-stale-after=30s", "--probe-interval=30s"}},
		"static past the cap":       {[]string{"--static-upstream=cp-2=10.0.0.2:6443", "--max-upstreams=1"}, []string{"--max-upstreams=1", "--static-upstream"}},
		"one listener twice":        {[]string{"--xds-listen=unix:///run/s.sock", "--extproc-listen=unix:///run/s.sock"}, []string{"--xds-listen=unix:///run/s.sock", "--extproc-listen=unix:///run/s.sock"}},
		"key apart from cert":       {[]string{"--front-proxy-key-file=/keys/fp.key"}, []string{"--front-proxy-key-file=/keys/fp.key", "--front-proxy-cert-file=/pki/fp.crt", "same directory"}},
		"half of gRPC mTLS":         {[]string{"--grpc-cert-file=/x/tls.crt", "--grpc-key-file=/x/tls.key"}, []string{"--grpc-cert-file=/x/tls.crt", "--grpc-client-ca-file"}},
		"pprof off loopback":        {[]string{"--pprof", "--http-listen=0.0.0.0:18080"}, []string{"--pprof", "--http-listen", "0.0.0.0:18080", "loopback"}},
		"endpoints, front loopback": {[]string{"--kubernetes-endpoints", "--front-address=127.0.0.1"}, []string{"--front-address=127.0.0.1", "loopback"}},
	} {
		_, err := parse(t, c.args...)
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %v does not name %q", name, err, w)
			}
		}
	}
	// Accepted: full mTLS off loopback, pprof on loopback, no grace.
	for _, args := range [][]string{
		{"--xds-listen=0.0.0.0:18000", "--extproc-listen=0.0.0.0:18001", "--grpc-cert-file=/x/tls.crt", "--grpc-key-file=/x/tls.key", "--grpc-client-ca-file=/x/ca.crt",
			"--envoy-extproc-address=10.0.0.5:18001", "--envoy-extproc-ca-file=/e/ca.crt", "--envoy-extproc-cert-file=/e/tls.crt", "--envoy-extproc-key-file=/e/tls.key", "--envoy-extproc-sni=skewgate.kube-system.svc"},
		{"--pprof", "--http-listen=[::1]:18080"},
		{"--pprof", "--http-listen=localhost:0"},
		{"--cluster-grace=0s", "--extproc-timeout=1ms", "--health-check-interval=100ms", "--front-port=65535", "--log-level=debug", "--log-format=console"},
		{"--grpc-plaintext-loopback", "--xds-listen=127.0.0.1:18000", "--extproc-listen=[::1]:18001"},
		{"--grpc-peer-uid=101", "--grpc-peer-uid=0", "--grpc-peer-uid=4294967294"},
		{"--kubernetes-endpoints", "--front-address=10.0.0.5"},
		{"--kubernetes-endpoints", "--kubernetes-endpoint-address=10.0.0.5", "--kubernetes-endpoints-ttl=5s", "--kubernetes-endpoints-member=cp-1.example"},
	} {
		if _, err := parse(t, args...); err != nil {
			t.Errorf("%v refused: %v", args, err)
		}
	}
}

// TestListenDefaults: /metrics, /topology (and pprof when asked) stay on the host unless the operator
// opens them; the gRPC listeners are unix sockets, whose peers the kernel names, and the defaults
// pass validation without --grpc-plaintext-loopback.
func TestListenDefaults(t *testing.T) {
	o := NewOptions()
	if local, err := grpcutil.IsLocal(o.HTTPListen); err != nil || !local || strings.HasPrefix(o.HTTPListen, "unix://") {
		t.Errorf("--http-listen defaults to %q, not a loopback host:port", o.HTTPListen)
	}
	for flag, addr := range map[string]string{"--xds-listen": o.XDSListen, "--extproc-listen": o.ExtProcListen} {
		if !strings.HasPrefix(addr, "unix:///") {
			t.Errorf("%s defaults to %q, not a unix socket", flag, addr)
		}
	}
	if o, err := parse(t); err != nil || o.GRPCPlaintextLoopback {
		t.Errorf("the defaults: %v (plaintext loopback %v)", err, o.GRPCPlaintextLoopback)
	}
}

// TestLibraryDefaults: Options built in code get the Envoy defaults for what they leave zero, while a
// flag given as zero is refused (above).
func TestLibraryDefaults(t *testing.T) {
	o, _ := parse(t)
	lib := NewOptions()
	lib.Kubeconfig = o.Kubeconfig
	lib.Envoy.ServingCertFile, lib.Envoy.ServingKeyFile = "/pki/front.crt", "/pki/front.key"
	lib.Envoy.UpstreamCAFile, lib.Envoy.FrontProxyCertFile, lib.Envoy.FrontProxyKeyFile = "/pki/ca.crt", "/pki/fp.crt", "/pki/fp.key"
	lib.Envoy.ExtProcTimeout, lib.Envoy.HealthCheckInterval = 0, 0
	lib.Complete()
	if errs := lib.Validate(); len(errs) > 0 {
		t.Fatalf("library options with zero Envoy durations refused: %v", errs)
	}
	if lib.Envoy.ExtProcTimeout != o.Envoy.ExtProcTimeout || lib.Envoy.HealthCheckInterval != o.Envoy.HealthCheckInterval {
		t.Errorf("library defaults %v, %v; flag defaults %v, %v", lib.Envoy.ExtProcTimeout, lib.Envoy.HealthCheckInterval, o.Envoy.ExtProcTimeout, o.Envoy.HealthCheckInterval)
	}
}

// TestKubernetesEndpointDefault: the endpoint is --front-address when that is one address, with
// --front-port; an explicit address wins.
func TestKubernetesEndpointDefault(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--kubernetes-endpoints", "--front-address=10.0.0.5", "--front-port=16443"}, "10.0.0.5:16443"},
		{[]string{"--kubernetes-endpoints", "--kubernetes-endpoint-address=10.0.0.6", "--front-port=16443"}, "10.0.0.6:16443"},
		{[]string{"--front-address=10.0.0.5"}, "invalid AddrPort"},
	} {
		o, err := parse(t, c.args...)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if got := o.KubernetesEndpoint().String(); got != c.want {
			t.Errorf("%v: endpoint %s, want %s", c.args, got, c.want)
		}
	}
}
