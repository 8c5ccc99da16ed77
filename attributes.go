package main

// The volume's attributes, what the pod author sets in volumeAttributes: which shares,
// refreshResource, defaultMode and the items that select keys and name their files. Pure, as the
// rest of the validation of a request (validate.go).

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/volume"
)

// Volume attributes a pod author may set (API-compatible with OpenShift's driver), besides each
// share kind's own (sharedSecret, sharedConfigMap: share.AllKinds).
const (
	attrRefreshResource = "refreshResource"
	attrDefaultMode     = "defaultMode"
	attrItems           = "items"
	attrShares          = "shares"
)

// maxShares bounds the shares of one volume (each costs a SubjectAccessReview and a GET).
const maxShares = 16

// maxItems bounds the entries of the items attribute. A list names files one by one, by hand:
// a thousand is far beyond any such list (the largest Secrets and ConfigMaps in common use, CA
// bundles and dashboards, are mounted whole, without items), and the bound keeps the record,
// which holds the list, and the parse small.
const maxItems = 1000

// defaultFileMode is what files get when the volume sets no defaultMode, as the kubelet's own
// secret volumes do.
const defaultFileMode os.FileMode = 0o644

// parseVolumeAttributes reads what the pod author set in the volume's volumeAttributes into v:
// the shares, refreshResource, defaultMode and items. Keys the kubelet adds are skipped; any
// other key is an error, so that a misspelt attribute is not silently ignored.
func parseVolumeAttributes(vc map[string]string, v *volumeRequest) error {
	shares, err := parseShareAttributes(vc)
	if err != nil {
		return err
	}
	v.Shares = shares
	if s, ok := vc[attrRefreshResource]; ok {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return invalidf("volumeAttribute %s must be \"true\" or \"false\", not %q", attrRefreshResource, s)
		}
		v.Refresh = b
	}
	if s, ok := vc[attrDefaultMode]; ok {
		m, err := parseMode(s)
		if err != nil {
			return invalidf("volumeAttribute %s: %v", attrDefaultMode, err)
		}
		v.DefaultMode = m
	}
	if s, ok := vc[attrItems]; ok {
		items, err := parseItems(s, v.Shares)
		if err != nil {
			return invalidf("volumeAttribute %s: %v", attrItems, err)
		}
		v.Items = items
	}
	supported := append(share.Attributes(), attrShares, attrRefreshResource, attrDefaultMode, attrItems)
	for k := range vc {
		if slices.Contains(supported, k) {
			continue
		}
		// The kubelet owns the csi.storage.k8s.io/ prefix and may add keys in newer releases;
		// rejecting those would break upgrades, so only unknown user attributes are errors.
		if strings.HasPrefix(k, kubeletKeyPrefix) {
			continue
		}
		return invalidf("unknown volumeAttribute %q: supported are %s", k, wordList(supported, "and"))
	}
	return nil
}

// parseShareAttributes reads which shares a volume mounts: exactly one of sharedSecret: NAME,
// sharedConfigMap: NAME (OpenShift's attributes) or shares: "secret/NAME, configmap/NAME, ...".
func parseShareAttributes(vc map[string]string) ([]share.Ref, error) {
	var shares []share.Ref
	for _, row := range share.AllKinds() {
		if name, ok := vc[row.Attribute]; ok {
			shares = append(shares, share.Ref{Kind: row.Kind, Name: name})
		}
	}
	list, hasList := vc[attrShares]
	switch {
	case len(shares)+btoi(hasList) > 1:
		return nil, invalidf("set exactly one of volumeAttributes %s, not several", wordList(append(share.Attributes(), attrShares), "and"))
	case hasList:
		for _, entry := range strings.Split(list, ",") {
			entry = strings.TrimSpace(entry)
			kind, name, ok := strings.Cut(entry, "/")
			s := share.Ref{Kind: share.KindOfListName(kind), Name: name}
			if !ok || s.Kind == "" {
				return nil, invalidf("volumeAttribute %s: entry %q is not %s", attrShares, entry, wordList(share.ListForms(), "or"))
			}
			if slices.Contains(shares, s) {
				return nil, invalidf("volumeAttribute %s: %q is listed twice", attrShares, s.String())
			}
			shares = append(shares, s)
		}
		if len(shares) > maxShares {
			return nil, invalidf("volumeAttribute %s lists %d shares; at most %d", attrShares, len(shares), maxShares)
		}
	case len(shares) == 0:
		return nil, invalidf("set one of volumeAttributes %s to the name of a share (or %s to a list of them)", wordList(share.Attributes(), "or"), attrShares)
	}
	for _, s := range shares {
		if !share.ValidName(s.Name) {
			return nil, invalidf("%s name %q is not a valid object name (lowercase RFC 1123 subdomain)", s.Kind.TypeName(), s.Name)
		}
	}
	return shares, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// parseMode reads an octal file mode such as "0440" or "440": permission bits only.
func parseMode(s string) (os.FileMode, error) {
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || s == "" || len(s) > 4 || m > 0o777 {
		return 0, fmt.Errorf("%q is not an octal file mode between 0000 and 0777 (e.g. \"0440\")", s)
	}
	return os.FileMode(m), nil
}

// parseItems reads the key selection: comma-separated entries KEY[=PATH][:MODE], e.g.
// "ca.crt, tls.key=keys/tls.key:0400". PATH is relative, checked segment by segment; MODE is
// octal. Two entries may not produce the same path, nor a path that is another's directory.
// In a volume of several shares, KEY names its share: secret/NAME/KEY or configmap/NAME/KEY.
func parseItems(s string, shares []share.Ref) ([]volume.Item, error) {
	var items []volume.Item
	paths := map[string]bool{}
	entries := strings.Split(s, ",")
	if len(entries) > maxItems {
		return nil, fmt.Errorf("%d entries; at most %d are allowed (without items, a volume shows every key its shares share)", len(entries), maxItems)
	}
	for _, entry := range entries {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			return nil, fmt.Errorf("empty entry in %q (entries are KEY[=PATH][:MODE], comma-separated)", s)
		}
		var it volume.Item
		rest, modeStr, hasMode := strings.Cut(entry, ":")
		if hasMode {
			m, err := parseMode(modeStr)
			if err != nil {
				return nil, fmt.Errorf("entry %q: %v", entry, err)
			}
			if m == 0 {
				return nil, fmt.Errorf("entry %q: mode 0000 would make the file unreadable", entry)
			}
			it.Mode = m
		}
		it.Key, it.Path, _ = strings.Cut(rest, "=")
		if i := strings.LastIndex(it.Key, "/"); i >= 0 {
			it.Share = slices.IndexFunc(shares, func(s share.Ref) bool { return s.String() == it.Key[:i] })
			if it.Share < 0 {
				return nil, fmt.Errorf("entry %q: %q is not one of the volume's shares", entry, it.Key[:i])
			}
			it.Key = it.Key[i+1:]
		} else if len(shares) > 1 {
			return nil, fmt.Errorf("entry %q: the volume has several shares; name the key as KIND/SHARE/KEY, e.g. %s/%s", entry, shares[0], it.Key)
		}
		if it.Path == "" {
			it.Path = it.Key
		}
		if err := atomicwriter.ValidateKey(it.Key); err != nil {
			return nil, fmt.Errorf("entry %q: %v", entry, err)
		}
		if err := atomicwriter.ValidatePath(it.Path); err != nil {
			return nil, fmt.Errorf("entry %q: %v", entry, err)
		}
		if paths[it.Path] {
			return nil, fmt.Errorf("entry %q: path %q is used twice", entry, it.Path)
		}
		paths[it.Path] = true
		items = append(items, it)
	}
	for p := range paths {
		for dir := range atomicwriter.ParentDirs(p) {
			if paths[dir] {
				return nil, fmt.Errorf("path %q is a file and also the directory of %q", dir, p)
			}
		}
	}
	perShare := make([][]string, len(shares))
	for _, it := range items {
		perShare[it.Share] = append(perShare[it.Share], it.Path)
	}
	n := 0
	for _, p := range perShare {
		n += volume.PathEntries(p)
	}
	if n > maxVolumeEntries {
		return nil, fmt.Errorf("its paths make %d files and directories; a volume holds at most %d: list fewer keys, or use shallower paths", n, maxVolumeEntries)
	}
	return items, nil
}

// wordList joins words as a sentence does: "a", "a or b", "a, b and c".
func wordList(words []string, conjunction string) string {
	if len(words) <= 1 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " " + conjunction + " " + words[len(words)-1]
}
