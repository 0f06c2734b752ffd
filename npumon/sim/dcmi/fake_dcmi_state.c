/* npumon's simulated libdcmi.so, part 2: the state file the Python simulator writes
   (npumon/sim/dcmi/state.py documents its format), reread whenever it changes; the injected faults (hang,
   segfault, return codes), what the product does not support, and the per-call latency. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "dcmi_interface_api.h"
#include "dcmi_driver_extras.h"
#include "fake_dcmi.h"

#define STATE_ENV "NPUMON_SIM_DCMI_STATE"
#define SIM_STATE_ENV "NPUMON_SIM_STATE"
#define STATE_FILE "dcmi-state.txt"
#define CLOCK_ENV "NPUMON_SIM_DCMI_CLOCK"
#define MAX_STATE_BYTES (4 * 1024 * 1024)
#define MAX_ENTRIES 16384

struct entry {
    const char *key;
    const char *value;
    int line; /* its order in the file: of two entries with one key, the first wins */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char *text;                 /* the file's contents, split in place into the entries */
static struct entry entries[MAX_ENTRIES];
static int entry_count;
static struct stat loaded_stat;
static int loaded;
static double call_t; /* scenario time of the current call */

static int same_file(const struct stat *a, const struct stat *b)
{
    return a->st_ino == b->st_ino && a->st_dev == b->st_dev && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

static const char *state_path(char *buffer, size_t size)
{
    const char *path = getenv(STATE_ENV);
    if (path != NULL && path[0] != '\0') {
        return path;
    }
    const char *dir = getenv(SIM_STATE_ENV);
    if (dir == NULL || dir[0] == '\0') {
        return NULL;
    }
    if ((size_t)snprintf(buffer, size, "%s/%s", dir, STATE_FILE) >= size) {
        return NULL;
    }
    return buffer;
}

static int compare_entries(const void *a, const void *b)
{
    const struct entry *left = a, *right = b;
    int order = strcmp(left->key, right->key);
    return order != 0 ? order : left->line - right->line;
}

static void parse(char *contents)
{
    entry_count = 0;
    char *line = contents;
    while (line != NULL && *line != '\0' && entry_count < MAX_ENTRIES) {
        char *next = strchr(line, '\n');
        if (next != NULL) {
            *next++ = '\0';
        }
        char *equals = strchr(line, '=');
        if (line[0] != '#' && equals != NULL) {
            *equals = '\0';
            entries[entry_count].key = line;
            entries[entry_count].value = equals + 1;
            entries[entry_count].line = entry_count;
            entry_count++;
        }
        line = next;
    }
    /* sorted by key, so that every lookup is a binary search: a call reads tens of keys from ~1,000 */
    qsort(entries, (size_t)entry_count, sizeof(entries[0]), compare_entries);
}

/* Reread the state file if it changed (the simulator replaces it by rename, so a reader sees the old
   or the new file, never half of one). Returns 1 when there is a state to answer from. */
static int reload(void)
{
    char buffer[4096];
    const char *path = state_path(buffer, sizeof(buffer));
    struct stat now;
    if (path == NULL || stat(path, &now) != 0 || now.st_size <= 0 || now.st_size > MAX_STATE_BYTES) {
        loaded = 0;
        return 0;
    }
    if (loaded && same_file(&now, &loaded_stat)) {
        return 1;
    }
    FILE *file = fopen(path, "r");
    if (file == NULL) {
        loaded = 0;
        return 0;
    }
    char *contents = malloc((size_t)now.st_size + 1);
    size_t length = contents == NULL ? 0 : fread(contents, 1, (size_t)now.st_size, file);
    fclose(file);
    if (contents == NULL || length != (size_t)now.st_size) {
        free(contents);
        loaded = 0;
        return 0;
    }
    contents[length] = '\0';
    free(text);
    text = contents;
    parse(text);
    loaded_stat = now;
    loaded = fake_get("format") != NULL;
    return loaded;
}

const char *fake_get(const char *key)
{
    int low = 0, high = entry_count; /* the first entry whose key is not below `key` */
    while (low < high) {
        int middle = low + (high - low) / 2;
        if (strcmp(entries[middle].key, key) < 0) {
            low = middle + 1;
        } else {
            high = middle;
        }
    }
    return low < entry_count && strcmp(entries[low].key, key) == 0 ? entries[low].value : NULL;
}

long fake_get_long(const char *key, long fallback)
{
    const char *value = fake_get(key);
    return value == NULL ? fallback : strtol(value, NULL, 0);
}

double fake_get_double(const char *key, double fallback)
{
    const char *value = fake_get(key);
    return value == NULL ? fallback : strtod(value, NULL);
}

const char *fake_chip_get(int logic, const char *field)
{
    char key[128];
    snprintf(key, sizeof(key), "chip.%d.%s", logic, field);
    return fake_get(key);
}

long fake_chip_long(int logic, const char *field, long fallback)
{
    const char *value = fake_chip_get(logic, field);
    return value == NULL ? fallback : strtol(value, NULL, 10);
}

/* Whether the space-separated list `list` holds the word `word`. */
static int has_word(const char *list, const char *word)
{
    size_t length = strlen(word);
    const char *cursor = list;
    while (list != NULL && (cursor = strstr(cursor, word)) != NULL) {
        int starts = cursor == list || cursor[-1] == ' ';
        int ends = cursor[length] == '\0' || cursor[length] == ' ';
        if (starts && ends) {
            return 1;
        }
        cursor += length;
    }
    return 0;
}

static double wall_clock(void)
{
    const char *fixed = getenv(CLOCK_ENV); /* tests: answer as at this wall time */
    if (fixed != NULL && fixed[0] != '\0') {
        return strtod(fixed, NULL);
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

static void sleep_seconds(double seconds)
{
    if (!(seconds > 0)) {
        return;
    }
    struct timespec wait = {(time_t)seconds, (long)((seconds - floor(seconds)) * 1e9)};
    while (nanosleep(&wait, &wait) != 0 && errno == EINTR) {
    }
}

static __thread const char *v2_function; /* the dcmiv2_* function whose V1 body runs on this thread */

void fake_v2_enter(const char *name)
{
    v2_function = name;
}

const char *fake_function_name(const char *name)
{
    const char *entered = v2_function;
    v2_function = NULL; /* for this one BEGIN only */
    return entered != NULL ? entered : name;
}

/* Whether `function` belongs to the other API than the product's (state key `api`: v1 or v2). */
static int other_api(const char *function)
{
    const char *api = fake_get("api");
    int v2_product = api != NULL && strcmp(api, "v2") == 0;
    int v2_call = strncmp(function, "dcmiv2_", 7) == 0;
    return v2_product != v2_call;
}

int fake_begin(const char *function, int is_init)
{
    pthread_mutex_lock(&lock);
    if (!reload()) {
        return DCMI_ERR_CODE_DEVICE_NOT_EXIST;
    }
    const char *segfault = fake_get("fault.segfault");
    if (segfault != NULL && (has_word(segfault, function) || (!is_init && has_word(segfault, "*")))) {
        volatile int *nowhere = NULL;
        *nowhere = 1; /* a real invalid access, as a wrong struct in a real driver library makes */
        raise(SIGSEGV);
    }
    const char *hang = fake_get("fault.hang");
    double pause = fake_get_double(is_init ? "init_seconds" : "call_seconds", 0.0);
    if (hang != NULL && (has_word(hang, function) || (!is_init && has_word(hang, "*")))) {
        pause += fake_get_double("fault.hang_seconds", 3600.0);
    }
    double start = fake_get_double("start_time", 0.0), scale = fake_get_double("time_scale", 1.0);
    if (pause > 0) { /* a hung or slow driver call holds the library, as a real ioctl does */
        sleep_seconds(pause);
    }
    call_t = fmax(0.0, (wall_clock() - start) * scale);
    return other_api(function) ? DCMI_ERR_CODE_NOT_SUPPORT : DCMI_OK;
}

double fake_call_time(void)
{
    return call_t;
}

void fake_end(void)
{
    pthread_mutex_unlock(&lock);
}

static int parse_words(const char *list, long *out, int max)
{
    int count = 0;
    char *end;
    while (list != NULL && count < max) {
        long value = strtol(list, &end, 0);
        if (end == list) {
            break;
        }
        out[count++] = value;
        list = end;
    }
    return count;
}

int fake_card_count(void)
{
    long cards[FAKE_MAX_CARDS];
    return parse_words(fake_get("cards"), cards, FAKE_MAX_CARDS);
}

int fake_card_id(int index)
{
    long cards[FAKE_MAX_CARDS];
    int count = parse_words(fake_get("cards"), cards, FAKE_MAX_CARDS);
    return index >= 0 && index < count ? (int)cards[index] : -1;
}

int fake_card_index(int card_id)
{
    long cards[FAKE_MAX_CARDS];
    int count = parse_words(fake_get("cards"), cards, FAKE_MAX_CARDS);
    for (int index = 0; index < count; index++) {
        if (cards[index] == card_id) {
            return index;
        }
    }
    return -1;
}

int fake_chips_per_card(void)
{
    return (int)fake_get_long("chips_per_card", 0);
}

int fake_mcu_id(void)
{
    return (int)fake_get_long("mcu_id", -1);
}

int fake_chip_count(void)
{
    return fake_card_count() * fake_chips_per_card();
}

int fake_injected_code(const char *function, int logic)
{
    char key[160];
    if (logic >= 0) {
        snprintf(key, sizeof(key), "fault.code.%s@%d", function, logic);
        if (fake_get(key) != NULL) {
            return (int)fake_get_long(key, 0);
        }
    }
    snprintf(key, sizeof(key), "fault.code.%s", function);
    return (int)fake_get_long(key, 0);
}

int fake_unsupported(const char *function, int input_type, int logic)
{
    const char *list = fake_get("unsupported"); /* words: "function", "function:type", "function@logic" */
    char word[160];
    if (list == NULL) {
        return 0;
    }
    if (has_word(list, function)) {
        return 1;
    }
    snprintf(word, sizeof(word), "%s:%d", function, input_type);
    if (input_type >= 0 && has_word(list, word)) {
        return 1;
    }
    snprintf(word, sizeof(word), "%s@%d", function, logic);
    return logic >= 0 && has_word(list, word);
}

const char *fake_error_text(int logic, unsigned int code)
{
    char name[64];
    snprintf(name, sizeof(name), "error.%08X", code);
    return fake_chip_get(logic, name);
}
