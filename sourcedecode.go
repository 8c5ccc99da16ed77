package main

// Reading a Secret or ConfigMap from the API server with as little new memory as the answer
// allows: the GET behind every cold publish and every refresh (getSource, fetch.go).

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/shared-resource/csi-driver/internal/share"
	"google.golang.org/protobuf/encoding/protowire"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
)

// getInto runs req and decodes its answer, a core/v1 object of kind, into obj. Do(ctx).Into(obj)
// would read the body with io.ReadAll, whose doubling buffer is new memory on every call, and
// its protobuf decoder copies the object's bytes out of the envelope (runtime.Unknown.Raw)
// before decoding them, which copies the data again: for a 1 MiB Secret some 4 MiB allocated,
// zeroed and page-faulted in, most of a cold publish's CPU (perf, on a VM where page faults are
// dear). Here the body goes into a pooled buffer and the object is decoded straight from the
// envelope's bytes: one copy, the data's own (the decoded object never points into the buffer:
// generated protobuf and JSON decoders copy bytes and strings).
//
// What Do would also have done is kept: a non-2xx answer is the same API status error (Stream
// makes it), a GET whose connection broke is retried (as Do does, a few times, a second apart),
// and an answer that is not obj's kind is an error, never an empty object: a refresh would
// publish it.
func (k *kubeClient) getInto(ctx context.Context, req *rest.Request, kind string, obj interface {
	runtime.Object
	share.ProtoUnmarshaler
}) error {
	buf := bodyBuffers.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxPooledBody {
			// Zeroed before it is kept: the answer holds every key of the source, also those a
			// share's list does not expose, and those must not outlive the decode (tens of
			// microseconds for 1 MiB, on a cold GET only).
			clear(buf.Bytes())
			buf.Reset()
			bodyBuffers.Put(buf)
		}
	}()
	for attempt := 1; ; attempt++ {
		buf.Reset()
		err := readAnswer(ctx, req, buf)
		if err == nil {
			break
		}
		if attempt == getRetries || !brokenConnection(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Second):
		}
	}
	if buf.Len() == 0 {
		return fmt.Errorf("GET %s: the API server answered with an empty body", req.URL().Path)
	}
	if done, err := decodeProtobufDirect(buf.Bytes(), kind, obj); done {
		return err
	}
	out, _, err := k.Decoder.Decode(buf.Bytes(), nil, obj)
	if err != nil {
		return err
	}
	if out != obj {
		if st, ok := out.(*metav1.Status); ok && st.Status != metav1.StatusSuccess {
			return apierrors.FromObject(st)
		}
		return fmt.Errorf("GET %s: the API server answered with a %T, not a %s", req.URL().Path, out, kind)
	}
	return nil
}

// getRetries is how many times a GET whose connection broke is tried, as Do would.
const getRetries = 3

// maxAnswer bounds the answer read: a Secret or ConfigMap holds at most 1 MiB of data.
const maxAnswer = 16 << 20

// readAnswer reads req's answer into buf.
func readAnswer(ctx context.Context, req *rest.Request, buf *bytes.Buffer) error {
	body, err := req.Stream(ctx)
	if err != nil {
		return err
	}
	defer body.Close()
	n, err := buf.ReadFrom(io.LimitReader(body, maxAnswer+1))
	if err != nil {
		return fmt.Errorf("reading the answer to GET %s: %w", req.URL().Path, err)
	}
	if n > maxAnswer {
		return fmt.Errorf("GET %s: the answer is larger than %d bytes", req.URL().Path, maxAnswer)
	}
	return nil
}

// brokenConnection says whether err is a connection that broke under the request, which Do
// retries for a GET.
func brokenConnection(err error) bool {
	return utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err) || utilnet.IsHTTP2ConnectionLost(err)
}

// protobufMagic starts every protobuf-encoded answer of the API server, followed by a
// runtime.Unknown: typeMeta (1: apiVersion 1, kind 2), raw (2), contentEncoding (3), contentType (4).
var protobufMagic = []byte("k8s\x00")

// decodeProtobufDirect decodes the core/v1 object of kind in a protobuf answer into obj, from
// the envelope's raw bytes in place. done is false (and obj untouched) for anything else: JSON,
// another kind or version, a content encoding, a malformed envelope; the generic decoder then
// takes it, and reports what is wrong.
func decodeProtobufDirect(body []byte, kind string, obj share.ProtoUnmarshaler) (done bool, err error) {
	b, ok := bytes.CutPrefix(body, protobufMagic)
	if !ok {
		return false, nil
	}
	var apiVersion, gotKind string
	var raw []byte
	haveRaw := false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false, nil
		}
		b = b[n:]
		if typ != protowire.BytesType || num < 1 || num > 4 {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return false, nil
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return false, nil
		}
		b = b[n:]
		switch num {
		case 1:
			if apiVersion, gotKind, ok = parseTypeMeta(v); !ok {
				return false, nil
			}
		case 2:
			raw, haveRaw = v, true
		case 3:
			if len(v) > 0 {
				return false, nil
			}
		}
	}
	if !haveRaw || apiVersion != "v1" || gotKind != kind {
		return false, nil
	}
	return true, obj.Unmarshal(raw)
}

// parseTypeMeta reads a runtime.TypeMeta: apiVersion (1) and kind (2).
func parseTypeMeta(b []byte) (apiVersion, kind string, ok bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", "", false
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return "", "", false
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return "", "", false
		}
		b = b[n:]
		switch num {
		case 1:
			apiVersion = string(v)
		case 2:
			kind = string(v)
		}
	}
	return apiVersion, kind, true
}

// bodyBuffers are the response bodies' buffers (getInto); one larger than maxPooledBody (a
// Secret is at most 1 MiB, plus its metadata) is left to the garbage collector.
var bodyBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledBody = 4 << 20
