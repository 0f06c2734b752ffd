/* npumon's simulated libdcmi.so, part 1: the DCMI functions, with the real signatures and structs of
   dcmi_interface_api.h (mind-cluster's copy of the driver header) and dcmi_driver_extras.h (the driver's
   own header), so a real libdcmi.so can stand in for this one and the other way round.
   Values come from the simulation's state at the moment of the call (fake_dcmi_state.c); units as the
   real library: power 0.1 W, voltage 0.01 V, memory MB, frequency MHz, utilisation %, process memory
   bytes. Which calls a product refuses (-8255) and every injected fault come from the state file. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "dcmi_interface_api.h"
#include "dcmi_driver_extras.h"
#include "fake_dcmi.h"

int fake_npu_chip(const char *function, int card_id, int device_id, int input_type, struct fake_chip *chip)
{
    int code = fake_chip_at(card_id, device_id, chip);
    if (code != DCMI_OK) {
        return code;
    }
    code = fake_injected_code(function, chip->logic);
    if (code != DCMI_OK) {
        return code;
    }
    return fake_unsupported(function, input_type, chip->logic) ? DCMI_ERR_CODE_NOT_SUPPORT : DCMI_OK;
}

/* The card's MCU answers a few calls: -1 if (card, device) is not an MCU, else a DCMI code. */
int fake_mcu_check(const char *function, int card_id, int device_id)
{
    if (card_id == FAKE_V2_CARD || fake_mcu_id() < 0 || device_id != fake_mcu_id()) {
        return -1;
    }
    if (fake_card_index(card_id) < 0) {
        return DCMI_ERR_CODE_INVALID_DEVICE_ID;
    }
    int code = fake_injected_code(function, -1);
    if (code != DCMI_OK) {
        return code;
    }
    return fake_unsupported(function, -1, -1) ? DCMI_ERR_CODE_NOT_SUPPORT : DCMI_OK;
}

void fake_copy_text(unsigned char *to, size_t size, const char *from)
{
    memset(to, 0, size);
    if (from != NULL) {
        strncpy((char *)to, from, size - 1);
    }
}

int fake_injected_or_unsupported(const char *function)
{
    int code = fake_injected_code(function, -1);
    if (code != DCMI_OK) {
        return code;
    }
    return fake_unsupported(function, -1, -1) ? DCMI_ERR_CODE_NOT_SUPPORT : DCMI_OK;
}

/* -- init and enumeration ------------------------------------------------------------------------------ */

int dcmi_init(void)
{
    int code = fake_begin("dcmi_init", 1);
    if (code == DCMI_OK) {
        code = (int)fake_get_long("fault.init", DCMI_OK);
    }
    fake_end();
    return code;
}

static int card_list(const char *function, int *card_num, int *card_list, int list_len)
{
    BEGIN(function);
    NEED(card_num);
    NEED(card_list);
    int code = fake_injected_or_unsupported(function);
    if (code != DCMI_OK) {
        RETURN(code);
    }
    int count = fake_card_count();
    if (list_len < count) {
        RETURN(DCMI_ERR_CODE_INVALID_PARAMETER);
    }
    for (int index = 0; index < count; index++) {
        card_list[index] = fake_card_id(index);
    }
    *card_num = count;
    RETURN(DCMI_OK);
}

int dcmi_get_card_list(int *card_num, int *card_list_out, int list_len)
{
    return card_list("dcmi_get_card_list", card_num, card_list_out, list_len);
}

int dcmi_get_card_num_list(int *card_num, int *card_list_out, int list_len)
{
    return card_list("dcmi_get_card_num_list", card_num, card_list_out, list_len);
}

int dcmi_get_device_num_in_card(int card_id, int *device_num)
{
    BEGIN("dcmi_get_device_num_in_card");
    NEED(device_num);
    if (fake_card_index(card_id) < 0) {
        RETURN(DCMI_ERR_CODE_INVALID_DEVICE_ID);
    }
    int code = fake_injected_or_unsupported(function_);
    if (code == DCMI_OK) {
        *device_num = fake_chips_per_card();
    }
    RETURN(code);
}

int dcmi_get_device_id_in_card(int card_id, int *device_id_max, int *mcu_id, int *cpu_id)
{
    BEGIN("dcmi_get_device_id_in_card");
    NEED(device_id_max);
    NEED(mcu_id);
    NEED(cpu_id);
    if (fake_card_index(card_id) < 0) {
        RETURN(DCMI_ERR_CODE_INVALID_DEVICE_ID);
    }
    int code = fake_injected_or_unsupported(function_);
    if (code == DCMI_OK) { /* 910B: max 1 (0 NPU, 1 MCU); A3: max 2 (0 and 1 dies, 2 MCU) */
        *mcu_id = fake_mcu_id();
        *device_id_max = *mcu_id >= 0 ? *mcu_id : fake_chips_per_card() - 1;
        *cpu_id = -1;
    }
    RETURN(code);
}

int dcmi_get_device_type(int card_id, int device_id, enum dcmi_unit_type *device_type)
{
    BEGIN("dcmi_get_device_type");
    NEED(device_type);
    int mcu = fake_mcu_check(function_, card_id, device_id);
    if (mcu >= 0 || mcu < -1) {
        if (mcu == DCMI_OK) {
            *device_type = MCU_TYPE;
        }
        RETURN(mcu);
    }
    CHIP(card_id, device_id, -1);
    *device_type = NPU_TYPE;
    RETURN(DCMI_OK);
}

int dcmi_get_device_logic_id(int *device_logic_id, int card_id, int device_id)
{
    BEGIN("dcmi_get_device_logic_id");
    NEED(device_logic_id);
    CHIP(card_id, device_id, -1);
    *device_logic_id = chip.logic;
    RETURN(DCMI_OK);
}

static int chip_by(int by_phy, unsigned int id, struct fake_chip *chip)
{
    for (int logic = 0; logic < fake_chip_count(); logic++) {
        if (fake_chip_by_logic(logic, chip) == DCMI_OK && (unsigned int)(by_phy ? chip->phy : chip->logic) == id) {
            return DCMI_OK;
        }
    }
    return DCMI_ERR_CODE_INVALID_DEVICE_ID;
}

static int id_lookup(const char *function, int by_phy, unsigned int id, struct fake_chip *chip)
{
    int code = chip_by(by_phy, id, chip);
    if (code == DCMI_OK) {
        code = fake_injected_code(function, chip->logic);
    }
    if (code == DCMI_OK && fake_unsupported(function, -1, chip->logic)) {
        code = DCMI_ERR_CODE_NOT_SUPPORT;
    }
    return code;
}

int dcmi_get_device_phyid_from_logicid(unsigned int logicid, unsigned int *phyid)
{
    BEGIN("dcmi_get_device_phyid_from_logicid");
    NEED(phyid);
    struct fake_chip chip;
    int code = id_lookup(function_, 0, logicid, &chip);
    if (code == DCMI_OK) {
        *phyid = (unsigned int)chip.phy;
    }
    RETURN(code);
}

int dcmi_get_device_logicid_from_phyid(unsigned int phyid, unsigned int *logicid)
{
    BEGIN("dcmi_get_device_logicid_from_phyid");
    NEED(logicid);
    struct fake_chip chip;
    int code = id_lookup(function_, 1, phyid, &chip);
    if (code == DCMI_OK) {
        *logicid = (unsigned int)chip.logic;
    }
    RETURN(code);
}

static int card_device_from(const char *function, int by_phy, unsigned int id, int *card_id, int *device_id)
{
    BEGIN(function);
    NEED(card_id);
    NEED(device_id);
    struct fake_chip chip;
    int code = id_lookup(function, by_phy, id, &chip);
    if (code == DCMI_OK) {
        *card_id = chip.card;
        *device_id = chip.device;
    }
    RETURN(code);
}

int dcmi_get_card_id_device_id_from_logicid(int *card_id, int *device_id, unsigned int device_logic_id)
{
    return card_device_from("dcmi_get_card_id_device_id_from_logicid", 0, device_logic_id, card_id, device_id);
}

int dcmi_get_card_id_device_id_from_phyid(int *card_id, int *device_id, unsigned int device_phy_id)
{
    return card_device_from("dcmi_get_card_id_device_id_from_phyid", 1, device_phy_id, card_id, device_id);
}

/* -- identity ----------------------------------------------------------------------------------------- */

static void fill_chip_info(struct dcmi_chip_info *info)
{
    fake_copy_text(info->chip_type, sizeof(info->chip_type), fake_get("chip_type"));
    fake_copy_text(info->chip_name, sizeof(info->chip_name), fake_get("chip_name"));
    fake_copy_text(info->chip_ver, sizeof(info->chip_ver), fake_get("chip_ver"));
    info->aicore_cnt = (unsigned int)fake_get_long("aicore_cnt", 0);
}

int dcmi_get_device_chip_info(int card_id, int device_id, struct dcmi_chip_info *chip_info)
{
    BEGIN("dcmi_get_device_chip_info");
    NEED(chip_info);
    CHIP(card_id, device_id, -1);
    fill_chip_info(chip_info);
    RETURN(DCMI_OK);
}

int dcmi_get_device_chip_info_v2(int card_id, int device_id, struct dcmi_chip_info_v2 *chip_info)
{
    BEGIN("dcmi_get_device_chip_info_v2");
    NEED(chip_info);
    CHIP(card_id, device_id, -1);
    struct dcmi_chip_info v1;
    fill_chip_info(&v1);
    memcpy(chip_info->chip_type, v1.chip_type, sizeof(v1.chip_type));
    memcpy(chip_info->chip_name, v1.chip_name, sizeof(v1.chip_name));
    memcpy(chip_info->chip_ver, v1.chip_ver, sizeof(v1.chip_ver));
    chip_info->aicore_cnt = v1.aicore_cnt;
    fake_copy_text(chip_info->npu_name, sizeof(chip_info->npu_name), fake_get("npu_name"));
    RETURN(DCMI_OK);
}

int dcmi_get_device_pcie_info_v2(int card_id, int device_id, struct dcmi_pcie_info_all *pcie_info)
{
    BEGIN("dcmi_get_device_pcie_info_v2");
    NEED(pcie_info);
    CHIP(card_id, device_id, -1);
    if (!chip.has_bus) { /* SoC boards have no PCIe function */
        RETURN(DCMI_ERR_CODE_NOT_SUPPORT);
    }
    memset(pcie_info, 0, sizeof(*pcie_info));
    pcie_info->venderid = (unsigned int)fake_get_long("pci_vendor_id", 0);
    pcie_info->subvenderid = (unsigned int)fake_get_long("pci_subsystem_vendor_id", 0);
    pcie_info->deviceid = (unsigned int)fake_get_long("pci_device_id", 0);
    pcie_info->subdeviceid = (unsigned int)fake_get_long("pci_subsystem_device_id", 0);
    pcie_info->domain = (int)chip.domain;
    pcie_info->bdf_busid = chip.bus;
    pcie_info->bdf_deviceid = chip.dev;
    pcie_info->bdf_funcid = chip.func;
    RETURN(DCMI_OK);
}

int dcmi_get_device_board_info(int card_id, int device_id, struct dcmi_board_info *board_info)
{
    BEGIN("dcmi_get_device_board_info");
    NEED(board_info);
    CHIP(card_id, device_id, -1);
    board_info->board_id = (unsigned int)fake_get_long("board_id", 0);
    board_info->pcb_id = (unsigned int)fake_get_long("pcb_id", 0);
    board_info->bom_id = (unsigned int)fake_get_long("bom_id", 0);
    board_info->slot_id = (unsigned int)fake_card_index(chip.card); /* npu-smi's "Slot ID" */
    RETURN(DCMI_OK);
}

int dcmi_get_device_die_v2(int card_id, int device_id, enum dcmi_die_type input_type, struct dcmi_die_id *die_id)
{
    BEGIN("dcmi_get_device_die_v2");
    NEED(die_id);
    CHIP(card_id, device_id, (int)input_type);
    if (input_type != NDIE && input_type != VDIE) {
        RETURN(DCMI_ERR_CODE_INVALID_PARAMETER);
    }
    memcpy(die_id->soc_die, input_type == VDIE ? chip.vdie : chip.ndie, sizeof(die_id->soc_die));
    RETURN(DCMI_OK);
}

int dcmi_get_device_compatibility(int card_id, int device_id, enum dcmi_device_compat *compatibility)
{
    BEGIN("dcmi_get_device_compatibility");
    NEED(compatibility);
    CHIP(card_id, device_id, -1);
    struct fake_chip first; /* the simulator sets it per card, on the card's chip 0, as npu-smi prints it */
    int code = fake_chip_at(card_id, 0, &first);
    if (code == DCMI_OK && first.compatibility == 0) { /* "NOT SUPPORT" */
        code = DCMI_ERR_CODE_NOT_SUPPORT;
    }
    if (code == DCMI_OK) {
        *compatibility = (enum dcmi_device_compat)first.compatibility;
    }
    RETURN(code);
}

int dcmi_get_card_elabel_v2(int card_id, struct dcmi_elabel_info *elabel_info)
{
    BEGIN("dcmi_get_card_elabel_v2");
    NEED(elabel_info);
    if (fake_card_index(card_id) < 0) {
        RETURN(DCMI_ERR_CODE_INVALID_DEVICE_ID);
    }
    int code = fake_injected_or_unsupported(function_);
    if (code != DCMI_OK) {
        RETURN(code);
    }
    char key[64];
    snprintf(key, sizeof(key), "card.%d.serial_number", card_id);
    fake_copy_text((unsigned char *)elabel_info->product_name, MAX_LENGTH, fake_get("elabel.product_name"));
    fake_copy_text((unsigned char *)elabel_info->model, MAX_LENGTH, fake_get("elabel.model"));
    fake_copy_text((unsigned char *)elabel_info->manufacturer, MAX_LENGTH, fake_get("elabel.manufacturer"));
    fake_copy_text((unsigned char *)elabel_info->manufacturer_date, MAX_LENGTH, "");
    fake_copy_text((unsigned char *)elabel_info->serial_number, MAX_LENGTH, fake_get(key));
    RETURN(DCMI_OK);
}

int dcmi_get_mainboard_id(int card_id, int device_id, unsigned int *mainboard_id)
{
    BEGIN("dcmi_get_mainboard_id");
    NEED(mainboard_id);
    CHIP(card_id, device_id, -1);
    if (fake_get("main_board_id") == NULL) {
        RETURN(DCMI_ERR_CODE_NOT_SUPPORT);
    }
    *mainboard_id = (unsigned int)fake_get_long("main_board_id", 0);
    RETURN(DCMI_OK);
}

static int version_text(const char *function, char *buffer, long size)
{
    BEGIN(function);
    NEED(buffer);
    int code = fake_injected_or_unsupported(function_);
    const char *version = fake_get("driver_version");
    if (code == DCMI_OK && (version == NULL || (long)strlen(version) >= size)) {
        code = DCMI_ERR_CODE_INVALID_PARAMETER;
    }
    if (code == DCMI_OK) {
        fake_copy_text((unsigned char *)buffer, (size_t)size, version);
    }
    RETURN(code);
}

int dcmi_get_dcmi_version(char *dcmi_ver, int buf_size)
{
    return version_text("dcmi_get_dcmi_version", dcmi_ver, buf_size);
}

int dcmi_get_driver_version(char *driver_ver, unsigned int len)
{
    return version_text("dcmi_get_driver_version", driver_ver, (long)len);
}
