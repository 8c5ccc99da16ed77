package main

// Specification of the source GET's decoding (getInto, sourcedecode.go): a protobuf answer is decoded
// straight from its envelope, to exactly what the generic decoder gives; anything else is left
// to the generic decoder.

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/shared-resource/csi-driver/internal/share"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/rest"
)

func TestDecodeProtobufDirect(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	codecs := serializer.NewCodecFactory(scheme)
	pb := protobuf.NewSerializer(scheme, scheme)
	js := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme, json.SerializerOptions{})
	encode := func(enc runtime.Encoder, obj runtime.Object) []byte {
		var b bytes.Buffer
		if err := enc.Encode(obj, &b); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	secret := &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "s", ResourceVersion: "42", Labels: map[string]string{"a": "b"}},
		Data:       map[string][]byte{"big": bytes.Repeat([]byte{7}, 1<<20), "empty": {}, "x": []byte("y")}, Type: corev1.SecretTypeOpaque}
	body := encode(pb, secret)

	got := &corev1.Secret{}
	done, err := decodeProtobufDirect(body, "Secret", got)
	if !done || err != nil {
		t.Fatalf("protobuf Secret: done=%v err=%v", done, err)
	}
	want := &corev1.Secret{}
	if _, _, err := codecs.UniversalDeserializer().Decode(body, nil, want); err != nil {
		t.Fatal(err)
	}
	want.TypeMeta = metav1.TypeMeta{}
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("direct decode differs from the generic one:\n%+v\n%+v", want.ObjectMeta, got.ObjectMeta)
	}
	// The data is the decoder's own copy: the body's buffer is reused.
	for i := range body {
		body[i] = 0
	}
	if got.Data["x"][0] != 'y' || got.Data["big"][1<<19] != 7 || got.ResourceVersion != "42" {
		t.Fatal("the decoded Secret points into the body")
	}

	for name, tc := range map[string]struct {
		body []byte
		kind string
	}{
		"JSON":         {encode(js, secret), "Secret"},
		"another kind": {encode(pb, &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}}), "Secret"},
		"truncated":    {encode(pb, secret)[:100], "Secret"},
		"empty":        {nil, "Secret"},
		"magic only":   {[]byte("k8s\x00"), "Secret"},
	} {
		if done, _ := decodeProtobufDirect(tc.body, tc.kind, &corev1.Secret{}); done {
			t.Errorf("%s: decoded directly, want it left to the generic decoder", name)
		}
	}
}

// What a GET of a source gives for each kind of answer, from a server that plays the API
// server: the object; the API error for an error status; an error, never an empty object, for an
// empty body, a Status of failure with code 200 or another kind; a connection that broke once is
// tried again.
func TestGetSecretAnswers(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	pb := protobuf.NewSerializer(scheme, scheme)
	encode := func(obj runtime.Object) []byte {
		var b bytes.Buffer
		if err := pb.Encode(obj, &b); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	secret := &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "s", ResourceVersion: "7"}, Data: map[string][]byte{"k": []byte("v")}}
	failure := &metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Status: metav1.StatusFailure,
		Reason: metav1.StatusReasonForbidden, Code: 403, Message: "no"}
	configMap := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "s"}}

	const protobufType = "application/vnd.kubernetes.protobuf"
	for _, tc := range []struct {
		name    string
		answer  func(w http.ResponseWriter, attempt int)
		wantErr string // "" for the Secret
		forbid  bool   // the error is the API's Forbidden
	}{
		{name: "the Secret", answer: func(w http.ResponseWriter, _ int) {
			w.Header().Set("Content-Type", protobufType)
			_, _ = w.Write(encode(secret)) // the client under test judges what arrives
		}},
		{name: "403 with a Status", forbid: true, wantErr: "no", answer: func(w http.ResponseWriter, _ int) {
			w.Header().Set("Content-Type", protobufType)
			w.WriteHeader(403)
			_, _ = w.Write(encode(failure)) // the client under test judges what arrives
		}},
		{name: "200 with a Status of failure", forbid: true, wantErr: "no", answer: func(w http.ResponseWriter, _ int) {
			w.Header().Set("Content-Type", protobufType)
			_, _ = w.Write(encode(failure)) // the client under test judges what arrives
		}},
		{name: "200 with an empty body", wantErr: "empty body", answer: func(w http.ResponseWriter, _ int) {
			w.Header().Set("Content-Type", protobufType)
		}},
		{name: "200 with a ConfigMap", wantErr: "not a Secret", answer: func(w http.ResponseWriter, _ int) {
			w.Header().Set("Content-Type", protobufType)
			_, _ = w.Write(encode(configMap)) // the client under test judges what arrives
		}},
		{name: "a connection reset, then the Secret", answer: func(w http.ResponseWriter, attempt int) {
			if attempt == 1 {
				conn, _, _ := w.(http.Hijacker).Hijack()
				_ = conn.(*net.TCPConn).SetLinger(0) // close with a reset (the test fails if it is not one)
				conn.Close()
				return
			}
			w.Header().Set("Content-Type", protobufType)
			_, _ = w.Write(encode(secret)) // the client under test judges what arrives
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var attempts atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				tc.answer(w, int(attempts.Add(1)))
			}))
			defer srv.Close()
			k, err := newKubeClient(&rest.Config{Host: srv.URL, ContentConfig: rest.ContentConfig{ContentType: protobufType}, QPS: -1})
			if err != nil {
				t.Fatal(err)
			}
			got, err := k.getSource(context.Background(), share.SourceKey{Kind: share.KindSecret, Namespace: "p", Name: "s"}, metav1.GetOptions{})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("err %v, want the Secret", err)
			case tc.wantErr == "" && (got.ResourceVersion != "7" || string(got.Files["k"]) != "v"):
				t.Fatalf("got %+v, want the Secret", got)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("err %v, want one saying %q", err, tc.wantErr)
			case tc.forbid && !apierrors.IsForbidden(err):
				t.Fatalf("err %v, want the API's Forbidden", err)
			}
		})
	}
}
