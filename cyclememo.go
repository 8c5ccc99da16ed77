package main

// A relist cycle's memo: each share, access decision and source the cycle asked the API server
// for, kept for the cycle's other volumes, so one cycle asks once per distinct share, review and
// source however many volumes share them (refresh.go). Judging (judge.go, shareidentity.go)
// asks through it.

import (
	"context"

	"github.com/shared-resource/csi-driver/internal/share"
)

// cycleMemo remembers, for one pass over volumes, each access decision and each source fetched.
type cycleMemo struct {
	d       *driver
	access  map[accessKey]memoDecision
	sources map[cacheKey]memoSource
	shares  map[share.Ref]memoShare
}

type memoShare struct {
	sh  share.Spec
	err error
}

type memoDecision struct {
	d   decision
	err error
}

type memoSource struct {
	data *share.SourceData
	err  error
}

func (d *driver) newCycleMemo() *cycleMemo {
	return &cycleMemo{d: d, access: map[accessKey]memoDecision{}, sources: map[cacheKey]memoSource{}, shares: map[share.Ref]memoShare{}}
}

// share reads the share from the informer, with a live GET when it is not cached, so that a
// share missing from the cache is confirmed deleted before any volume is revoked for it.
func (m *cycleMemo) share(ctx context.Context, ref share.Ref) (share.Spec, error) {
	if r, ok := m.shares[ref]; ok {
		return r.sh, r.err
	}
	sh, err := m.d.shares.Get(ctx, ref.Kind, ref.Name)
	m.shares[ref] = memoShare{sh, err}
	return sh, err
}

func (m *cycleMemo) decision(ctx context.Context, key accessKey) (decision, error) {
	if r, ok := m.access[key]; ok {
		return r.d, r.err
	}
	dec, err := m.d.authz.recheck(ctx, key)
	m.access[key] = memoDecision{dec, err}
	return dec, err
}

// source is sh's source as sh exposes it.
func (m *cycleMemo) source(ctx context.Context, sh share.Spec) (*share.SourceData, error) {
	key := cacheKey{sh.SourceKey(), sh.Exposed.Fingerprint()}
	if r, ok := m.sources[key]; ok {
		return r.data, r.err
	}
	data, err := m.d.sources.refresh(ctx, sh.SourceKey(), sh.Exposed)
	m.sources[key] = memoSource{data, err}
	return data, err
}
