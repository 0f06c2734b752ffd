/* npumon: declarations of the simulated libdcmi.so that the mind-cluster header (dcmi_interface_api.h)
   lacks, copied verbatim from the driver's own header:
   source: github.com/hicann/driver@ef377e950a32b1641c108c59481e39e9643b7d63:src/custom/include/dcmi_interface_api.h
   (CANN Open Software License 2.0), as excerpted in shared/reference/dcmi_prototypes.h.txt section [D]. */
#ifndef NPUMON_DCMI_DRIVER_EXTRAS_H
#define NPUMON_DCMI_DRIVER_EXTRAS_H

/* error codes */
#define DCMI_OK 0
#define DCMI_ERROR_CODE_BASE (-8000)
#define DCMI_ERR_CODE_INVALID_PARAMETER             (DCMI_ERROR_CODE_BASE - 1)
#define DCMI_ERR_CODE_OPER_NOT_PERMITTED            (DCMI_ERROR_CODE_BASE - 2)
#define DCMI_ERR_CODE_MEM_OPERATE_FAIL              (DCMI_ERROR_CODE_BASE - 3)
#define DCMI_ERR_CODE_SECURE_FUN_FAIL               (DCMI_ERROR_CODE_BASE - 4)
#define DCMI_ERR_CODE_INNER_ERR                     (DCMI_ERROR_CODE_BASE - 5)
#define DCMI_ERR_CODE_TIME_OUT                      (DCMI_ERROR_CODE_BASE - 6)
#define DCMI_ERR_CODE_INVALID_DEVICE_ID             (DCMI_ERROR_CODE_BASE - 7)
#define DCMI_ERR_CODE_DEVICE_NOT_EXIST              (DCMI_ERROR_CODE_BASE - 8)
#define DCMI_ERR_CODE_IOCTL_FAIL                    (DCMI_ERROR_CODE_BASE - 9)
#define DCMI_ERR_CODE_SEND_MSG_FAIL                 (DCMI_ERROR_CODE_BASE - 10)
#define DCMI_ERR_CODE_RECV_MSG_FAIL                 (DCMI_ERROR_CODE_BASE - 11)
#define DCMI_ERR_CODE_NOT_REDAY                     (DCMI_ERROR_CODE_BASE - 12)
#define DCMI_ERR_CODE_NOT_SUPPORT_IN_CONTAINER      (DCMI_ERROR_CODE_BASE - 13)
#define DCMI_ERR_CODE_FILE_OPERATE_FAIL             (DCMI_ERROR_CODE_BASE - 14)
#define DCMI_ERR_CODE_RESET_FAIL                    (DCMI_ERROR_CODE_BASE - 15)
#define DCMI_ERR_CODE_ABORT_OPERATE                 (DCMI_ERROR_CODE_BASE - 16)
#define DCMI_ERR_CODE_IS_UPGRADING                  (DCMI_ERROR_CODE_BASE - 17)
#define DCMI_ERR_CODE_RESOURCE_OCCUPIED             (DCMI_ERROR_CODE_BASE - 20)
#define DCMI_ERR_CODE_PARTITION_NOT_RIGHT           (DCMI_ERROR_CODE_BASE - 22)
#define DCMI_ERR_CODE_CONFIG_INFO_NOT_EXIST         (DCMI_ERROR_CODE_BASE - 23)
#define DCMI_ERR_CODE_NOT_SUPPORT                   (DCMI_ERROR_CODE_BASE - 255)

/* dcmi_get_device_utilization_rate input_type codes */
#define    DCMI_UTILIZATION_RATE_DDR             1
#define    DCMI_UTILIZATION_RATE_AICORE          2
#define    DCMI_UTILIZATION_RATE_AICPU           3
#define    DCMI_UTILIZATION_RATE_CTRLCPU         4
#define    DCMI_UTILIZATION_RATE_DDR_BANDWIDTH   5
#define    DCMI_UTILIZATION_RATE_HBM             6
#define    DCMI_UTILIZATION_RATE_HBM_BANDWIDTH   10
#define    DCMI_UTILIZATION_RATE_VECTORCORE      12
#define    DCMI_UTILIZATION_RATE_NPU             13
#define    DCMI_UTILIZATION_RATE_AICUBE          14

enum dcmi_device_compat {
    DCMI_COMPAT_OK = 1,
    DCMI_COMPAT_NOK = 2,
    DCMI_COMPAT_UNKNOWN = 3
};

DCMIDLLEXPORT int dcmi_get_driver_version(char *driver_ver, unsigned int len);

DCMIDLLEXPORT int dcmi_get_device_compatibility(int card_id, int device_id, enum dcmi_device_compat *compatibility);

DCMIDLLEXPORT int dcmi_get_card_num_list(int *card_num, int *card_list, int list_len);

DCMIDLLEXPORT int dcmi_get_device_errorcode_string(
 int card_id, int device_id, unsigned int error_code, unsigned char *error_info, int buf_size);

/* the HCCS status and lane structs of dcmi_get_device_info(DCMI_MAIN_CMD_HCCS, ...), as
   shared/reference/interconnect-and-compute.md 1.4 describes the driver header's (HDR l.427-512; sizes 12 and
   132 bytes measured with gcc there); the statistic structs and the SIO one are in dcmi_interface_api.h */
#define DCMI_HCCS_STATUS_SUB_CMD 0
#define DCMI_HCCS_LANE_INFO_SUB_CMD 1
#define DCMI_HCCS_STATISTIC_SUB_CMD 3
#define DCMI_HCCS_STATISTIC_U64_SUB_CMD 5
#define DCMI_SIO_SUB_CMD_CRC_ERR_STATISTICS 0
#define DCMI_HDLC_STATUS_OK 0x3
#define DCMI_HCCS_LANE_PCS_NUM 16
struct dcmi_hccs_statues {
    unsigned int pcs_status;
    unsigned int hdlc_status;
    unsigned char reserve[4];
};
struct dcmi_hccs_lane_info {
    unsigned int hccs_port_pcs_bitmap;
    unsigned int pcs_lane_bitmap[DCMI_HCCS_LANE_PCS_NUM];
    unsigned int reserve[DCMI_HCCS_LANE_PCS_NUM];
};

/* the 950's UB ports (dcmiv2_get_ub_port_link_status), as shared/reference/interconnect-and-compute.md 1.4
   describes the driver header's (HDR l.427-512, 148 bytes): the chip's state, then one state per port */
#define DCMI_UB_PORT_NUM 36
typedef enum {
    DCMI_UB_ALL_PORT_NO_LINK = 0,
    DCMI_UB_ALL_PORT_LINK,
    DCMI_UB_PARTIAL_PORT_LINK,
    DCMI_UB_NO_NEED_LINK,
} dcmi_entire_ub_status;
typedef enum {
    DCMI_UB_PORT_STATUS_NONE_LANE = 0,
    DCMI_UB_PORT_STATUS_FULL_LANE,
    DCMI_UB_PORT_STATUS_PARTIAL_LANE,
    DCMI_UB_PORT_STATUS_INITIAL,
} dcmi_ub_port_status;
struct dcmi_ub_port_link_status {
    dcmi_entire_ub_status ub_link_status;
    dcmi_ub_port_status ub_port_status[DCMI_UB_PORT_NUM];
};

DCMIDLLEXPORT int dcmiv2_get_ub_port_link_status(int dev_id, struct dcmi_ub_port_link_status *ub_status);

/* a UB port's traffic over profiling_time ms (1-226), MB/s (interconnect-and-compute.md 1.4) */
struct dcmi_ub_bandwidth_info {
    unsigned int tx_bandwidth;
    unsigned int rx_bandwidth;
    unsigned int reserved[2];
};

DCMIDLLEXPORT int dcmiv2_get_ub_realtime_bandwidth_info(int dev_id, unsigned int profiling_time,
                                                        struct dcmi_ub_port_info *ub_port_info,
                                                        struct dcmi_ub_bandwidth_info *ub_bandwidth_info);

#endif
