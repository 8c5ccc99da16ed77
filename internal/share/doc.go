// Package share is what a share is to the driver: the kinds of share and their table (AllKinds, one
// row a kind: what it is called, after internal/shareapi, and how its source is decoded), a
// share's name (Ref) and its source's (SourceKey), the part of a SharedSecret or SharedConfigMap
// the driver uses (Spec, read from an object by FromObject, with the errors of a share that
// cannot be used or is being deleted), what a share exposes of its source (Exposure, its
// spec.items, and the error of a source lacking a listed key: MissingSharedKeysError), a source
// object's files as a share exposes them (SourceData), the pin on the object it was made for and
// its pure rules (Pin, FirstPinRefusal), a share's status.conditions as written (Conditions), and
// the informers over the two share CRDs that serve them (Index).
//
// The contract: everything here but Index is pure: it reads an object it is given and holds no
// state. An Index reads only the share CRDs (informers, and one live GET of a share its cache
// has not seen yet), never a Secret or a ConfigMap; it is safe for concurrent use once started.
// The words a share is read by (its fields, the pin's) are internal/shareapi's, which the
// admin's commands read too; this package imports it and internal/atomicwriter (the key rule a
// share's list is checked by), and nothing else of the driver's. The root imports it.
package share
