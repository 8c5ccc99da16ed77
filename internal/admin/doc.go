// Package admin is the admin's commands, `diagnose` (diagnose.go) and `who-uses` (whouses.go),
// which the binary runs as `shared-resource-csi COMMAND` or, named kubectl-shared_resource, as
// the kubectl plugin `kubectl shared-resource COMMAND`.
//
// The contract:
//
//   - They read the cluster with the caller's own kubeconfig, and only read (adminclient.go):
//     pods, Deployments, events, the share objects, a source's metadata (never its data), and
//     SubjectAccessReviews, which are questions and change nothing. Each request is counted and
//     printed; a refused one (403) is named as a permission the caller lacks, and a verdict it
//     leaves open is Undetermined, never a guess.
//   - They write only their report, to stdout (text or JSON), and their errors to stderr. Values
//     from the cluster are others' text (a pod's author writes its volume attributes, a share's
//     owner its messages): the text report, the JSON report and every error line print each
//     escaped, so that it can neither start a line of the output's own nor reach the terminal
//     as a control sequence.
//   - They never write to the cluster, never read a Secret's or ConfigMap's data, and never
//     reach into the node plugin: what they read as the driver reads it (a volume's attributes,
//     a share object, its conditions, the driver's service accounts) they take from the Driver
//     main hands in, built from the node plugin's own functions; the API's names are
//     internal/shareapi's.
package admin
