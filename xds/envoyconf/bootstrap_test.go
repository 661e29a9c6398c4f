package envoyconf

import (
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/internal/xdstest"
)

var update = flag.Bool("update", false, "rewrite envoy/bootstrap.yaml and envoy/sds/")

// exampleBootstrap is the example under envoy/; `go test ./xds/envoyconf -run Bootstrap -update` rewrites it.
func exampleBootstrap() BootstrapOptions {
	return BootstrapOptions{
		NodeID: "front-1", NodeCluster: "skewgate-front",
		XDSAddress: "skewgate.cp-1.example:18000",
		XDSCAFile:  "/etc/skewgate/xds/ca.crt", XDSCertFile: "/etc/skewgate/xds/tls.crt", XDSKeyFile: "/etc/skewgate/xds/tls.key",
		Delta: true,
	}
}

// The example; the SDS files go to sds/ beside it.
const exampleBootstrapPath = "../../envoy/bootstrap.yaml"

var bootstrapCopies = []string{exampleBootstrapPath}

// TestBootstrapSDSGolden compares the SDS files of the example with envoy/sds/.
func TestBootstrapSDSGolden(t *testing.T) {
	files, err := BootstrapSDSFiles(exampleBootstrap())
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 {
		t.Fatalf("SDS files %v, want the client certificate and the CA", len(files))
	}
	for _, dir := range bootstrapCopies {
		for name, got := range files {
			got = append([]byte("# Rendered by `skewgate bootstrap` with mTLS; checked by TestBootstrapSDSGolden.\n"), got...)
			xdstest.CheckGolden(t, filepath.Join(filepath.Dir(dir), "sds", name), got, *update, "go test ./xds/envoyconf -run Bootstrap -update")
		}
	}
	// The bootstrap names exactly these files, in the directory it watches.
	b, err := Bootstrap(exampleBootstrap())
	if err != nil {
		t.Fatal(err)
	}
	y, _ := BootstrapYAML(b)
	for name := range files {
		if !strings.Contains(string(y), "path: "+DefaultSDSDir+"/"+name) {
			t.Errorf("the bootstrap does not reference %s/%s:\n%s", DefaultSDSDir, name, y)
		}
	}
}

func TestBootstrapGolden(t *testing.T) {
	b, err := Bootstrap(exampleBootstrap())
	if err != nil {
		t.Fatal(err)
	}
	got, err := BootstrapYAML(b)
	if err != nil {
		t.Fatal(err)
	}
	got = append([]byte("# Rendered by `skewgate bootstrap` (see README); checked by TestBootstrapGolden.\n"), got...)
	for _, path := range bootstrapCopies {
		xdstest.CheckGolden(t, path, got, *update, "go test ./xds/envoyconf -run Bootstrap -update")
	}
}

func TestBootstrapRefusesUnsafe(t *testing.T) {
	// Each unsafe option is refused with an error naming what is wrong with it.
	for name, c := range map[string]struct {
		mut  func(*BootstrapOptions)
		want string
	}{
		"admin off loopback":    {func(o *BootstrapOptions) { o.AdminAddress = "0.0.0.0:9901" }, `admin address "0.0.0.0:9901" must be a loopback ip:port or unix:///path`},
		"admin relative socket": {func(o *BootstrapOptions) { o.AdminAddress = "unix://envoy-admin.sock" }, `admin address "unix://envoy-admin.sock": want unix:///absolute/path`},
		"plaintext xDS off-box": {func(o *BootstrapOptions) { o.XDSCAFile, o.XDSCertFile, o.XDSKeyFile = "", "", "" }, "is not loopback or a unix socket: plaintext gRPC is only allowed on the same host"},
		"half of mTLS":          {func(o *BootstrapOptions) { o.XDSKeyFile = "" }, "mTLS needs all of --xds-ca-file, --xds-cert-file and --xds-key-file, or none"},
		"no node id":            {func(o *BootstrapOptions) { o.NodeID = "" }, "node id and node cluster are required"},
		"no xDS address":        {func(o *BootstrapOptions) { o.XDSAddress = "" }, "xDS address is required"},
		"key apart from cert":   {func(o *BootstrapOptions) { o.XDSKeyFile = "/etc/skewgate/keys/tls.key" }, `--xds-key-file "/etc/skewgate/keys/tls.key" must be in the same directory`},
		"relative SDS dir":      {func(o *BootstrapOptions) { o.SDSDir = "sds" }, `"sds" must be an absolute path`},
		"negative max conns":    {func(o *BootstrapOptions) { o.MaxConnections = -1 }, "max connections -1: want a positive number"},
	} {
		o := exampleBootstrap()
		c.mut(&o)
		if _, err := Bootstrap(o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one with %q", name, err, c.want)
		}
	}
	o := exampleBootstrap()
	o.XDSAddress, o.XDSCAFile, o.XDSCertFile, o.XDSKeyFile = "unix:///run/skewgate/xds.sock", "", "", ""
	if _, err := Bootstrap(o); err != nil {
		t.Errorf("unix socket refused: %v", err)
	}
}

// TestBootstrapAdminSocket: an admin listener on a unix socket is a pipe only Envoy's user may use.
func TestBootstrapAdminSocket(t *testing.T) {
	o := exampleBootstrap()
	o.AdminAddress = "unix:///var/lib/skewgate/envoy-admin.sock"
	b, err := Bootstrap(o)
	if err != nil {
		t.Fatal(err)
	}
	p := b.GetAdmin().GetAddress().GetPipe()
	if p.GetPath() != "/var/lib/skewgate/envoy-admin.sock" || p.GetMode() != 0o600 {
		t.Errorf("admin address %v, want the pipe with mode 0600", b.GetAdmin().GetAddress())
	}
}
