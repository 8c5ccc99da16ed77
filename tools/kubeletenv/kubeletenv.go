// Package kubeletenv reads an env file as the kubelet does for `env[].valueFrom.fileKeyRef`, with
// the kubelet's own parser (k8s.io/kubernetes/pkg/kubelet/util/env) at the version this module
// requires: the newest supported minor's, or the next minor's pre-release when hack/kube-next.sh
// runs the tests against it. Its tests hold `shared-resource-csi env-file` to what that parser
// reads.
package kubeletenv

import (
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"

	"k8s.io/kubernetes/pkg/kubelet/util/env"
)

// Read returns what the kubelet takes for key from the env file at path: the value, whether the
// key is there, or the error that fails the container's start. The parser returns (value, error)
// before 1.38, and the kubelet then takes an empty value for a missing key; from 1.38 it returns
// (value, found, error). Called through reflect so that one source builds against both.
func Read(path, key string) (value string, found bool, err error) {
	out := reflect.ValueOf(env.ParseEnv).Call([]reflect.Value{reflect.ValueOf(path), reflect.ValueOf(key)})
	value = out[0].String()
	if e := out[len(out)-1].Interface(); e != nil {
		err = e.(error)
	}
	switch len(out) {
	case 2:
		found = value != ""
	case 3:
		found = out[1].Bool()
	default:
		return "", false, fmt.Errorf("env.ParseEnv returns %d values: this package knows 2 (before 1.38) and 3", len(out))
	}
	return value, found, err
}

// Version is the version of k8s.io/kubernetes the parser comes from (v1.37.2, v1.38.0-beta.0),
// read from the path of its source file as compiled in (module@version/..., with or without
// -trimpath): a test binary records no module versions.
func Version() (string, error) {
	fn := runtime.FuncForPC(reflect.ValueOf(env.ParseEnv).Pointer())
	if fn == nil {
		return "", errors.New("no symbol for env.ParseEnv")
	}
	file, _ := fn.FileLine(fn.Entry())
	_, rest, ok := strings.Cut(file, "k8s.io/kubernetes@")
	version, _, _ := strings.Cut(rest, "/")
	if !ok || version == "" {
		return "", fmt.Errorf("env.ParseEnv's source %s is not in a k8s.io/kubernetes@VERSION module", file)
	}
	return version, nil
}
