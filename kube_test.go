package main

// Specification of the source GET's decoding (getInto, kube.go): a protobuf answer is decoded
// straight from its envelope, to exactly what the generic decoder gives; anything else is left
// to the generic decoder.

import (
	"bytes"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
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
