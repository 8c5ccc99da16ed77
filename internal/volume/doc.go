// Package volume is a volume's storage on the node: what its files cost the node's memory, in the
// units the node's budget charges.
//
// The contract: pure figures over a volume's files, from the kernel's rules for a tmpfs (an
// inode and a dentry per entry, a name or a link target beyond the inline size, whole pages of
// data). It knows nothing of Kubernetes, of shares or of the driver's record, and imports nothing
// of the driver's but internal/atomicwriter, whose layout it charges; the root imports it.
package volume
