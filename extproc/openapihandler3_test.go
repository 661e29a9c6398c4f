package extproc

import (
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"k8s.io/apiserver/pkg/server/mux"
	"k8s.io/kube-openapi/pkg/handler3"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// handler3Serves asks a real kube-openapi handler3.OpenAPIService, registered the way an
// apiserver registers it (RegisterOpenAPIV3VersionedService on k8s.io/apiserver's
// PathRecorderMux, the apiserver's non-go-restful mux), for the path of u (its query dropped: a
// hash only decides between 200 and 301). The service holds one document, registered under key
// and titled with it (hex-encoded: JSON would replace invalid UTF-8), so the answer says which key
// handler3 read from the path: it reports the status and the key of the document served (or
// whether the index was served).
func handler3Serves(t testing.TB, u *url.URL, key string) (status int, title string, index bool) {
	t.Helper()
	svc := handler3.NewOpenAPIService()
	m := mux.NewPathRecorderMux("fuzz")
	if err := svc.RegisterOpenAPIV3VersionedService("/openapi/v3", m); err != nil {
		t.Fatal(err)
	}
	if key != "" {
		svc.UpdateGroupVersion(key, &spec3.OpenAPI{Version: "3.0.0", Info: &spec.Info{InfoProps: spec.InfoProps{Title: hex.EncodeToString([]byte(key))}}})
	}
	pathOnly := *u
	pathOnly.RawQuery = ""
	r := &http.Request{Method: http.MethodGet, URL: &pathOnly, RequestURI: pathOnly.RequestURI(), Header: http.Header{"Accept": {"application/json"}}, Host: "front"}
	w := httptest.NewRecorder()
	m.ServeHTTP(w, r)
	var body struct {
		Info  *struct{ Title string } `json:"info"`
		Paths map[string]any          `json:"paths"`
	}
	// handler3 answers an unknown key 200 with no body (HandleGroupVersion returns when
	// getSingleGroupBytes fails): an empty body is "no document", never a parse failure.
	if w.Code == http.StatusOK && w.Body.Len() > 0 {
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s: handler3 answered 200 with %q: %v", u, w.Body.String(), err)
		}
	}
	if body.Info != nil {
		k, err := hex.DecodeString(body.Info.Title)
		if err != nil {
			t.Fatalf("%s: handler3 served a document titled %q: %v", u, body.Info.Title, err)
		}
		title = string(k)
	}
	return w.Code, title, body.Paths != nil
}

// handler3Agrees fails unless handler3, holding only key, serves exactly that key's document (or,
// for index, its index) at u's path.
func handler3Agrees(t testing.TB, raw string, u *url.URL, key string, index bool) {
	t.Helper()
	status, title, servedIndex := handler3Serves(t, u, key)
	switch {
	case index && (status != http.StatusOK || !servedIndex):
		t.Errorf("%q: the front serves its index there, handler3 answers %d (index %v)", raw, status, servedIndex)
	case !index && (status != http.StatusOK || title != key):
		t.Errorf("%q: the front decides key %q, handler3 holding that key answers %d with the document of %q", raw, key, status, title)
	}
}
