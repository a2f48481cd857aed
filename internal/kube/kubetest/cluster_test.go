package kubetest

import "testing"

func TestNotEstablished(t *testing.T) {
	for _, tc := range []struct {
		name, json, want string
	}{
		{"one, established", `{"kind":"CustomResourceDefinition","metadata":{"name":"a.x"},"status":{"conditions":[{"type":"NamesAccepted","status":"True"},{"type":"Established","status":"True"}]}}`, ""},
		// A CRD created a moment ago: what kubectl wait fails on.
		{"one, no conditions yet", `{"kind":"CustomResourceDefinition","metadata":{"name":"a.x"},"status":{}}`, "a.x"},
		{"one, not yet", `{"kind":"CustomResourceDefinition","metadata":{"name":"a.x"},"status":{"conditions":[{"type":"Established","status":"False"}]}}`, "a.x"},
		{"a list", `{"kind":"List","items":[
			{"metadata":{"name":"a.x"},"status":{"conditions":[{"type":"Established","status":"True"}]}},
			{"metadata":{"name":"b.x"},"status":{"conditions":[{"type":"NamesAccepted","status":"True"}]}},
			{"metadata":{"name":"c.x"}}]}`, "b.x, c.x"},
		{"an empty list", `{"kind":"List","items":[]}`, ""},
		{"not JSON", `error: the server doesn't have a resource type "crd"`, "unreadable: invalid character 'e' looking for beginning of value"},
	} {
		if got := notEstablished([]byte(tc.json)); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
