package main

// Specification of what the gRPC servers log (csi.go): a request with its secrets and tokens stripped.

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
)

func TestStripSecretsRemovesSecretsAndTokens(t *testing.T) {
	req := goodPublishRequest()
	req.Secrets = map[string]string{"password": "hunter2-secret"}
	req.VolumeContext[ctxServiceAccountTok] = `{"aud":{"token":"eyJhbGciOi-secret-token"}}`
	out := prototext.Format(stripSecrets(req))
	for _, leak := range []string{"hunter2-secret", "eyJhbGciOi-secret-token"} {
		if strings.Contains(out, leak) {
			t.Errorf("sanitized request still contains %q:\n%s", leak, out)
		}
	}
	if !strings.Contains(out, "corp-ca") || !strings.Contains(out, strippedValue) {
		t.Errorf("sanitized request lost non-secret fields:\n%s", out)
	}
	// The original is untouched.
	if req.Secrets["password"] != "hunter2-secret" {
		t.Error("stripSecrets modified the request")
	}
}
