//go:build cgo && !nordma

package rdmacm

/*
#include <stddef.h>
#include "verbs_linux.h"

enum {
	gonvmf_off_send_remote = offsetof(gonvmf_send_wr, remote_addr),
	gonvmf_off_send_num_sge = offsetof(gonvmf_send_wr, num_sge),
	gonvmf_off_send_sgl = offsetof(gonvmf_send_wr, sgl),
	gonvmf_off_recv_sgl = offsetof(gonvmf_recv_wr, sgl),
};
*/
import "C"

import "unsafe"

// Compile-time checks that the Go structs handed to C have the layout C
// expects and that the Go constants equal the C enums. Each line indexes a
// one-element array with a-b: it compiles only if a == b (a > b is out of
// range, a < b overflows uintptr).
var _ = func() (x [1]struct{}) {
	_ = x[unsafe.Sizeof(SGE{})-C.sizeof_struct_ibv_sge]
	_ = x[unsafe.Offsetof(SGE{}.Length)-unsafe.Offsetof(C.struct_ibv_sge{}.length)]
	_ = x[unsafe.Offsetof(SGE{}.LKey)-unsafe.Offsetof(C.struct_ibv_sge{}.lkey)]

	_ = x[unsafe.Sizeof(SendWR{})-C.sizeof_gonvmf_send_wr]
	_ = x[unsafe.Offsetof(SendWR{}.Op)-unsafe.Offsetof(C.gonvmf_send_wr{}.opcode)]
	_ = x[unsafe.Offsetof(SendWR{}.Flags)-unsafe.Offsetof(C.gonvmf_send_wr{}.flags)]
	_ = x[unsafe.Offsetof(SendWR{}.RemoteAddr)-C.gonvmf_off_send_remote]
	_ = x[unsafe.Offsetof(SendWR{}.RKey)-unsafe.Offsetof(C.gonvmf_send_wr{}.rkey)]
	_ = x[unsafe.Offsetof(SendWR{}.Imm)-unsafe.Offsetof(C.gonvmf_send_wr{}.imm)]
	_ = x[unsafe.Offsetof(SendWR{}.NumSGE)-C.gonvmf_off_send_num_sge]
	_ = x[unsafe.Offsetof(SendWR{}.SGL)-C.gonvmf_off_send_sgl]
	_ = x[MaxSGE-C.GONVMF_MAX_SGE]

	_ = x[unsafe.Sizeof(RecvWR{})-C.sizeof_gonvmf_recv_wr]
	_ = x[unsafe.Offsetof(RecvWR{}.NumSGE)-unsafe.Offsetof(C.gonvmf_recv_wr{}.num_sge)]
	_ = x[unsafe.Offsetof(RecvWR{}.SGL)-C.gonvmf_off_recv_sgl]
	_ = x[MaxRecvSGE-C.GONVMF_MAX_RECV_SGE]

	_ = x[unsafe.Sizeof(Completion{})-C.sizeof_struct_ibv_wc]
	_ = x[unsafe.Offsetof(Completion{}.Status)-unsafe.Offsetof(C.struct_ibv_wc{}.status)]
	_ = x[unsafe.Offsetof(Completion{}.Opcode)-unsafe.Offsetof(C.struct_ibv_wc{}.opcode)]
	_ = x[unsafe.Offsetof(Completion{}.VendorErr)-unsafe.Offsetof(C.struct_ibv_wc{}.vendor_err)]
	_ = x[unsafe.Offsetof(Completion{}.ByteLen)-unsafe.Offsetof(C.struct_ibv_wc{}.byte_len)]
	_ = x[unsafe.Offsetof(Completion{}.QPNum)-unsafe.Offsetof(C.struct_ibv_wc{}.qp_num)]
	_ = x[unsafe.Offsetof(Completion{}.SrcQP)-unsafe.Offsetof(C.struct_ibv_wc{}.src_qp)]
	_ = x[unsafe.Offsetof(Completion{}.Flags)-unsafe.Offsetof(C.struct_ibv_wc{}.wc_flags)]
	_ = x[unsafe.Offsetof(Completion{}.PKeyIndex)-unsafe.Offsetof(C.struct_ibv_wc{}.pkey_index)]
	_ = x[unsafe.Offsetof(Completion{}.SLID)-unsafe.Offsetof(C.struct_ibv_wc{}.slid)]
	_ = x[unsafe.Offsetof(Completion{}.SL)-unsafe.Offsetof(C.struct_ibv_wc{}.sl)]
	_ = x[unsafe.Offsetof(Completion{}.DLIDBits)-unsafe.Offsetof(C.struct_ibv_wc{}.dlid_path_bits)]

	_ = x[OpWrite-C.IBV_WR_RDMA_WRITE]
	_ = x[OpWriteImm-C.IBV_WR_RDMA_WRITE_WITH_IMM]
	_ = x[OpSend-C.IBV_WR_SEND]
	_ = x[OpSendImm-C.IBV_WR_SEND_WITH_IMM]
	_ = x[OpRead-C.IBV_WR_RDMA_READ]
	_ = x[OpSendInv-C.IBV_WR_SEND_WITH_INV]
	_ = x[CapMemMgtExtensions-C.IBV_DEVICE_MEM_MGT_EXTENSIONS]
	_ = x[FlagFence-C.IBV_SEND_FENCE]
	_ = x[FlagSignaled-C.IBV_SEND_SIGNALED]
	_ = x[FlagSolicited-C.IBV_SEND_SOLICITED]
	_ = x[FlagInline-C.IBV_SEND_INLINE]
	_ = x[WCSuccess-C.IBV_WC_SUCCESS]
	_ = x[WCFlushErr-C.IBV_WC_WR_FLUSH_ERR]
	_ = x[WCRemAccessErr-C.IBV_WC_REM_ACCESS_ERR]
	_ = x[WCRetryExcErr-C.IBV_WC_RETRY_EXC_ERR]
	_ = x[WCRNRRetryExcErr-C.IBV_WC_RNR_RETRY_EXC_ERR]
	_ = x[WCGeneralErr-C.IBV_WC_GENERAL_ERR]
	_ = x[WCSend-C.IBV_WC_SEND]
	_ = x[WCWrite-C.IBV_WC_RDMA_WRITE]
	_ = x[WCRead-C.IBV_WC_RDMA_READ]
	_ = x[WCRecv-C.IBV_WC_RECV]
	_ = x[WCRecvImm-C.IBV_WC_RECV_RDMA_WITH_IMM]
	_ = x[WCWithImm-C.IBV_WC_WITH_IMM]
	_ = x[WCWithInv-C.IBV_WC_WITH_INV]
	_ = x[AccessLocalWrite-C.IBV_ACCESS_LOCAL_WRITE]
	_ = x[AccessRemoteWrite-C.IBV_ACCESS_REMOTE_WRITE]
	_ = x[AccessRemoteRead-C.IBV_ACCESS_REMOTE_READ]
	_ = x[EventAddrResolved-C.RDMA_CM_EVENT_ADDR_RESOLVED]
	_ = x[EventConnectRequest-C.RDMA_CM_EVENT_CONNECT_REQUEST]
	_ = x[EventRejected-C.RDMA_CM_EVENT_REJECTED]
	_ = x[EventEstablished-C.RDMA_CM_EVENT_ESTABLISHED]
	_ = x[EventDisconnected-C.RDMA_CM_EVENT_DISCONNECTED]
	_ = x[EventDeviceRemoval-C.RDMA_CM_EVENT_DEVICE_REMOVAL]
	_ = x[EventTimewaitExit-C.RDMA_CM_EVENT_TIMEWAIT_EXIT]
	_ = x[AsyncCQErr-C.IBV_EVENT_CQ_ERR]
	_ = x[AsyncQPFatal-C.IBV_EVENT_QP_FATAL]
	_ = x[AsyncDeviceFatal-C.IBV_EVENT_DEVICE_FATAL]
	_ = x[AsyncPortErr-C.IBV_EVENT_PORT_ERR]
	_ = x[AsyncQPLastWQEReached-C.IBV_EVENT_QP_LAST_WQE_REACHED]
	_ = x[AsyncWQFatal-C.IBV_EVENT_WQ_FATAL]
	_ = x[PortActive-C.IBV_PORT_ACTIVE]
	_ = x[LinkLayerEthernet-C.IBV_LINK_LAYER_ETHERNET]
	_ = x[LinkLayerInfiniBand-C.IBV_LINK_LAYER_INFINIBAND]
	_ = x[GIDTypeRoCEv2-C.IBV_GID_TYPE_ROCE_V2]
	return x
}
