// Package nvmeproto owns the NVMe and NVMe over Fabrics wire formats: submission and
// completion queue entries, status codes, SGL descriptors, Fabrics commands, controller
// properties, Identify data structures, log pages, feature dwords and the nvme-rdma CM
// private data.
//
// Every structure is encoded and decoded explicitly as little-endian bytes at the offsets
// the NVMe Base and NVMe over Fabrics specifications give; nothing here uses reflection, and
// the per-command types (Command, Completion, SGLDescriptor) decode into caller-owned
// values without allocating so that they can sit on a target's I/O path. Decoders of
// network input return an error for short or malformed input and never panic.
//
// The package does no I/O and imports nothing else from gonvmf.
package nvmeproto
