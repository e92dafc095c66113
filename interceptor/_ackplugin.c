/*
 * Native ack recording: a librdkafka interceptor plugin that is also a Python extension module.
 *
 * librdkafka loads this file as a plugin (plugin.library.paths) and calls conf_init() once per
 * producer configuration; Python has already imported it as interceptor._ackplugin, so both see
 * the same globals. Each producer's on_acknowledgement() interceptor stores the last successful
 * ack per (topic, partition) in an AckTable: the record's timestamp, the CLOCK_MONOTONIC time of
 * the ack, and a count. It runs on librdkafka's broker threads and never touches Python; Python
 * drains the entries changed since its last look from its scheduler thread.
 *
 * Its on_send() interceptor (on the application's thread, in produce()) also keeps, per topic, the
 * timestamps of the records sent and not acknowledged yet (on_acknowledgement() settles every
 * one, delivered or failed: librdkafka unrolls a failed produce's on_send by an on_ack). Ticks go
 * through a producer of their own, so a record still in flight may land after a tick: a tick is
 * never dated above the oldest record in flight to its topic (in_flight()).
 *
 * Nothing here links against librdkafka: the wheel's copy has a hashed name and is loaded
 * RTLD_LOCAL, so Python resolves the few functions used here on the already-loaded library
 * (ctypes) and hands their addresses to bind() before any producer loads the plugin. Only the
 * public, stable parts of librdkafka's ABI are declared below.
 */
#define PY_SSIZE_T_CLEAN
/* The stable ABI of CPython 3.11 (the project's floor): one build serves every later version,
 * so the wheel can be tagged abi3 (docs/contributing.md says how). */
#define Py_LIMITED_API 0x030B0000
#include <Python.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- The subset of librdkafka's public ABI (rdkafka.h) this plugin uses. ---- */

typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_conf_s rd_kafka_conf_t;
typedef struct rd_kafka_topic_s rd_kafka_topic_t;
typedef int rd_kafka_resp_err_t; /* enum rd_kafka_resp_err_t */
typedef int rd_kafka_conf_res_t; /* enum rd_kafka_conf_res_t */
typedef int rd_kafka_timestamp_type_t;

#define RK_ERR_NO_ERROR 0
#define RK_ERR_FAIL (-196)     /* RD_KAFKA_RESP_ERR__FAIL */
#define RK_ERR_CONFLICT (-173) /* RD_KAFKA_RESP_ERR__CONFLICT */
#define RK_CONF_UNKNOWN (-2)
#define RK_CONF_INVALID (-1)
#define RK_CONF_OK 0
#define RK_TIMESTAMP_LOG_APPEND_TIME 2

/* The leading members of rd_kafka_message_t, in their public order. */
typedef struct {
    rd_kafka_resp_err_t err;
    rd_kafka_topic_t *rkt;
    int32_t partition;
} rk_message_head_t;

typedef rd_kafka_conf_res_t(on_conf_set_f)(rd_kafka_conf_t *, const char *, const char *, char *,
                                           size_t, void *);
typedef rd_kafka_resp_err_t(on_conf_dup_f)(rd_kafka_conf_t *, const rd_kafka_conf_t *, size_t,
                                           const char **, void *);
typedef rd_kafka_resp_err_t(on_conf_destroy_f)(void *);
typedef rd_kafka_resp_err_t(on_new_f)(rd_kafka_t *, const rd_kafka_conf_t *, void *, char *,
                                      size_t);
typedef rd_kafka_resp_err_t(on_acknowledgement_f)(rd_kafka_t *, rk_message_head_t *, void *);
typedef rd_kafka_resp_err_t(on_send_f)(rd_kafka_t *, rk_message_head_t *, void *);

static struct {
    rd_kafka_resp_err_t (*add_on_conf_set)(rd_kafka_conf_t *, const char *, on_conf_set_f *,
                                           void *);
    rd_kafka_resp_err_t (*add_on_conf_dup)(rd_kafka_conf_t *, const char *, on_conf_dup_f *,
                                           void *);
    rd_kafka_resp_err_t (*add_on_conf_destroy)(rd_kafka_conf_t *, const char *,
                                               on_conf_destroy_f *, void *);
    rd_kafka_resp_err_t (*add_on_new)(rd_kafka_conf_t *, const char *, on_new_f *, void *);
    rd_kafka_resp_err_t (*add_on_acknowledgement)(rd_kafka_t *, const char *,
                                                  on_acknowledgement_f *, void *);
    rd_kafka_resp_err_t (*add_on_send)(rd_kafka_t *, const char *, on_send_f *, void *);
    const char *(*topic_name)(const rd_kafka_topic_t *);
    int64_t (*message_timestamp)(const rk_message_head_t *, rd_kafka_timestamp_type_t *);
} rk;
static atomic_int rk_bound;

#define IC_NAME "progress-control-acks"
#define TABLE_PROPERTY "progress.control.ack.table"

/* ---- The ack table: append-only entries, an open-addressing index, a list of dirty ones. ---- */

typedef struct {
    char *topic;
    int32_t partition;
    int32_t timestamp_type;
    int64_t timestamp_ms;
    int64_t ack_ns; /* CLOCK_MONOTONIC */
    uint64_t acks;
    int dirty;
} ack_entry_t;

/* Timestamps with a count each, ascending: a multiset. */
typedef struct {
    int64_t stamp;
    uint32_t count;
} stamp_count_t;

typedef struct {
    stamp_count_t *items;
    size_t len, capacity;
} stamp_set_t;

/* One topic's records in flight: its sends less its acknowledgements (delivered or failed).
 * The application's threads add sends under flight_lock, the broker threads acknowledgements
 * under the table's lock, each to a set of its own, so neither waits on the other per record;
 * flights_merge() subtracts one set from the other now and then, under both. */
typedef struct {
    char *topic;
    /* The topic's acks carry the broker's append time: sends cannot be matched to acks, and
     * the broker dates ticks and data alike, so nothing needs holding back. */
    atomic_int log_append_time;
    stamp_set_t sent;    /* flight_lock */
    stamp_set_t settled; /* the table's lock */
} flight_t;

typedef struct ack_table {
    pthread_mutex_t lock;
    atomic_long refs;
    uint64_t id;
    ack_entry_t *entries;
    size_t count, capacity;
    int32_t *slots; /* entry index or -1; a power of two, at least twice count */
    size_t slot_mask;
    uint32_t *dirty; /* indexes of entries changed since the last drain; capacity entries */
    size_t dirty_count;
    uint64_t acks, dropped;
    pthread_mutex_t flight_lock; /* the sends; taken before the table's lock when both are */
    flight_t *flights;           /* per topic; added under both locks */
    size_t flight_count, flight_capacity;
    uint64_t untracked; /* records not tracked (out of memory); flight_lock */
    struct ack_table *next_registered;
} ack_table_t;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static ack_table_t *registry;
static uint64_t last_table_id;

static uint64_t key_hash(const char *topic, int32_t partition) {
    uint64_t hash = 1469598103934665603ULL; /* FNV-1a */
    for (const unsigned char *c = (const unsigned char *)topic; *c; c++)
        hash = (hash ^ *c) * 1099511628211ULL;
    return (hash ^ (uint32_t)partition) * 1099511628211ULL;
}

static void table_release(ack_table_t *table) {
    if (atomic_fetch_sub(&table->refs, 1) != 1)
        return;
    for (size_t i = 0; i < table->count; i++)
        free(table->entries[i].topic);
    for (size_t i = 0; i < table->flight_count; i++) {
        flight_t *flight = &table->flights[i];
        free(flight->topic);
        free(flight->sent.items);
        free(flight->settled.items);
    }
    free(table->flights);
    free(table->entries);
    free(table->slots);
    free(table->dirty);
    pthread_mutex_destroy(&table->lock);
    pthread_mutex_destroy(&table->flight_lock);
    free(table);
}

static int table_grow(ack_table_t *table) {
    size_t capacity = table->capacity ? table->capacity * 2 : 16;
    ack_entry_t *entries = realloc(table->entries, capacity * sizeof *entries);
    if (!entries)
        return -1;
    table->entries = entries;
    uint32_t *dirty = realloc(table->dirty, capacity * sizeof *dirty);
    if (!dirty)
        return -1;
    table->dirty = dirty;
    size_t slot_count = capacity * 2;
    int32_t *slots = malloc(slot_count * sizeof *slots);
    if (!slots)
        return -1;
    for (size_t i = 0; i < slot_count; i++)
        slots[i] = -1;
    for (size_t i = 0; i < table->count; i++) {
        size_t slot = key_hash(entries[i].topic, entries[i].partition) & (slot_count - 1);
        while (slots[slot] >= 0)
            slot = (slot + 1) & (slot_count - 1);
        slots[slot] = (int32_t)i;
    }
    free(table->slots);
    table->slots = slots;
    table->slot_mask = slot_count - 1;
    table->capacity = capacity;
    return 0;
}

/* The entry of (topic, partition), added when new; NULL when out of memory. Lock held. */
static ack_entry_t *table_entry(ack_table_t *table, const char *topic, int32_t partition) {
    uint64_t hash = key_hash(topic, partition);
    if (table->slots) {
        for (size_t slot = hash & table->slot_mask; table->slots[slot] >= 0;
             slot = (slot + 1) & table->slot_mask) {
            ack_entry_t *entry = &table->entries[table->slots[slot]];
            if (entry->partition == partition && strcmp(entry->topic, topic) == 0)
                return entry;
        }
    }
    if (table->count == table->capacity && (table->count >= INT32_MAX / 4 || table_grow(table)))
        return NULL;
    char *name = strdup(topic);
    if (!name)
        return NULL;
    size_t slot = hash & table->slot_mask;
    while (table->slots[slot] >= 0)
        slot = (slot + 1) & table->slot_mask;
    table->slots[slot] = (int32_t)table->count;
    ack_entry_t *entry = &table->entries[table->count++];
    memset(entry, 0, sizeof *entry);
    entry->topic = name;
    entry->partition = partition;
    return entry;
}

/* ---- Records in flight (sent, not acknowledged yet). ---- */

/* The topic's flight; NULL when it has none. Either lock held. */
static flight_t *flight_find(ack_table_t *table, const char *topic) {
    for (size_t i = 0; i < table->flight_count; i++)
        if (strcmp(table->flights[i].topic, topic) == 0)
            return &table->flights[i];
    return NULL;
}

/* The topic's flight, added when new; NULL when out of memory. flight_lock held. */
static flight_t *flight_add_topic(ack_table_t *table, const char *topic) {
    flight_t *flight = flight_find(table, topic);
    if (flight)
        return flight;
    char *name = strdup(topic);
    if (!name)
        return NULL;
    pthread_mutex_lock(&table->lock); /* the broker threads look topics up under it */
    if (table->flight_count == table->flight_capacity) {
        size_t capacity = table->flight_capacity ? table->flight_capacity * 2 : 4;
        flight_t *flights = realloc(table->flights, capacity * sizeof *flights);
        if (!flights) {
            pthread_mutex_unlock(&table->lock);
            free(name);
            return NULL;
        }
        table->flights = flights;
        table->flight_capacity = capacity;
    }
    flight = &table->flights[table->flight_count++];
    memset(flight, 0, sizeof *flight);
    flight->topic = name;
    pthread_mutex_unlock(&table->lock);
    return flight;
}

/* One more record at stamp (mostly at the end: records come in order); -1 when out of memory. */
static int stamps_add(stamp_set_t *set, int64_t stamp) {
    stamp_count_t *items = set->items;
    size_t at = set->len;
    if (at && items[at - 1].stamp >= stamp) {
        if (items[at - 1].stamp > stamp) { /* out of order: the first entry at or above stamp */
            size_t low = 0, high = at;
            while (low < high) {
                size_t mid = low + (high - low) / 2;
                if (items[mid].stamp < stamp)
                    low = mid + 1;
                else
                    high = mid;
            }
            at = low;
        } else {
            at--; /* the common case: the same millisecond as the last */
        }
        if (items[at].stamp == stamp) {
            items[at].count++;
            return 0;
        }
    }
    if (set->len == set->capacity) {
        size_t capacity = set->capacity ? set->capacity * 2 : 64;
        items = realloc(items, capacity * sizeof *items);
        if (!items)
            return -1;
        set->items = items;
        set->capacity = capacity;
    }
    memmove(items + at + 1, items + at, (set->len - at) * sizeof *items);
    items[at] = (stamp_count_t){stamp, 1};
    set->len++;
    return 0;
}

/* sent -= settled, settled emptied: both locks held. Every acknowledgement's send was added
 * before it (on_send runs before the record can be acknowledged), so each finds its stamp. */
static void flight_merge(flight_t *flight) {
    stamp_set_t *sent = &flight->sent, *settled = &flight->settled;
    if (atomic_load(&flight->log_append_time)) {
        sent->len = settled->len = 0;
        return;
    }
    size_t kept = 0, j = 0;
    for (size_t i = 0; i < sent->len; i++) {
        stamp_count_t item = sent->items[i];
        while (j < settled->len && settled->items[j].stamp < item.stamp)
            j++; /* a send not tracked (out of memory) */
        if (j < settled->len && settled->items[j].stamp == item.stamp) {
            uint32_t done = settled->items[j++].count;
            item.count -= done < item.count ? done : item.count;
        }
        if (item.count)
            sent->items[kept++] = item;
    }
    sent->len = kept;
    settled->len = 0;
}

/* Merge every topic's flight: flight_lock held; takes the table's lock. */
static void flights_merge(ack_table_t *table) {
    pthread_mutex_lock(&table->lock);
    for (size_t i = 0; i < table->flight_count; i++)
        flight_merge(&table->flights[i]);
    pthread_mutex_unlock(&table->lock);
}

/* ---- The plugin: one instance per producer configuration. ---- */

typedef struct {
    ack_table_t *table; /* NULL until TABLE_PROPERTY is set */
} plugin_conf_t;

static on_conf_set_f on_conf_set;
static on_conf_dup_f on_conf_dup;
static on_conf_destroy_f on_conf_destroy;
static on_new_f on_new;
static on_acknowledgement_f on_acknowledgement;
static on_send_f on_send;

static rd_kafka_resp_err_t on_send(rd_kafka_t *rk_, rk_message_head_t *message, void *opaque) {
    (void)rk_;
    if (!message->rkt)
        return RK_ERR_NO_ERROR;
    ack_table_t *table = opaque;
    rd_kafka_timestamp_type_t timestamp_type = 0;
    int64_t timestamp_ms = rk.message_timestamp(message, &timestamp_type);
    const char *topic = rk.topic_name(message->rkt);
    pthread_mutex_lock(&table->flight_lock);
    flight_t *flight = flight_add_topic(table, topic);
    if (flight && !atomic_load(&flight->log_append_time)) {
        if (flight->sent.len == flight->sent.capacity)
            flights_merge(table); /* before growing: most of it is acknowledged by now */
        if (stamps_add(&flight->sent, timestamp_ms))
            flight = NULL;
    }
    if (!flight)
        table->untracked++;
    pthread_mutex_unlock(&table->flight_lock);
    return RK_ERR_NO_ERROR;
}

static rd_kafka_resp_err_t on_acknowledgement(rd_kafka_t *rk_, rk_message_head_t *message,
                                              void *opaque) {
    (void)rk_;
    if (!message->rkt)
        return RK_ERR_NO_ERROR;
    ack_table_t *table = opaque;
    rd_kafka_timestamp_type_t timestamp_type = 0;
    int64_t timestamp_ms = rk.message_timestamp(message, &timestamp_type);
    const char *topic = rk.topic_name(message->rkt);
    struct timespec now;
    pthread_mutex_lock(&table->lock);
    flight_t *flight = flight_find(table, topic);
    if (flight && !atomic_load(&flight->log_append_time)) {
        if (message->err == RK_ERR_NO_ERROR && timestamp_type == RK_TIMESTAMP_LOG_APPEND_TIME)
            atomic_store(&flight->log_append_time, 1); /* its sets are left to the next merge */
        else if (stamps_add(&flight->settled, timestamp_ms))
            table->dropped++; /* out of memory: the record stays held, never released early */
    }
    if (message->err != RK_ERR_NO_ERROR) { /* only successful deliveries are acks */
        pthread_mutex_unlock(&table->lock);
        return RK_ERR_NO_ERROR;
    }
    /* Read under the lock: a partition's ack times never go backwards. */
    clock_gettime(CLOCK_MONOTONIC, &now);
    ack_entry_t *entry = table_entry(table, topic, message->partition);
    if (entry) {
        entry->timestamp_ms = timestamp_ms;
        entry->timestamp_type = timestamp_type;
        entry->ack_ns = (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec;
        entry->acks++;
        table->acks++;
        if (!entry->dirty) {
            entry->dirty = 1;
            table->dirty[table->dirty_count++] = (uint32_t)(entry - table->entries);
        }
    } else {
        table->dropped++;
    }
    pthread_mutex_unlock(&table->lock);
    return RK_ERR_NO_ERROR;
}

static plugin_conf_t *plugin_conf_new(ack_table_t *table) {
    plugin_conf_t *plugin = calloc(1, sizeof *plugin);
    if (plugin && table) {
        atomic_fetch_add(&table->refs, 1);
        plugin->table = table;
    }
    return plugin;
}

/* Adds the configuration interceptors; on_conf_destroy last, as it is the one that frees. */
static rd_kafka_resp_err_t plugin_conf_register(rd_kafka_conf_t *conf, plugin_conf_t *plugin) {
    rd_kafka_resp_err_t err = rk.add_on_conf_set(conf, IC_NAME, on_conf_set, plugin);
    if (!err)
        err = rk.add_on_conf_dup(conf, IC_NAME, on_conf_dup, plugin);
    if (!err)
        err = rk.add_on_new(conf, IC_NAME, on_new, plugin);
    if (!err)
        err = rk.add_on_conf_destroy(conf, IC_NAME, on_conf_destroy, plugin);
    return err;
}

static rd_kafka_conf_res_t on_conf_set(rd_kafka_conf_t *conf, const char *name, const char *value,
                                       char *errstr, size_t errstr_size, void *opaque) {
    (void)conf;
    if (strcmp(name, TABLE_PROPERTY) != 0)
        return RK_CONF_UNKNOWN;
    plugin_conf_t *plugin = opaque;
    ack_table_t *table = NULL;
    if (value) {
        char *end = NULL;
        errno = 0;
        unsigned long long id = strtoull(value, &end, 10);
        if (errno || !end || *end || end == value) {
            snprintf(errstr, errstr_size, "%s: not a table id: %s", TABLE_PROPERTY, value);
            return RK_CONF_INVALID;
        }
        pthread_mutex_lock(&registry_lock);
        for (table = registry; table && table->id != id; table = table->next_registered)
            ;
        if (table)
            atomic_fetch_add(&table->refs, 1);
        pthread_mutex_unlock(&registry_lock);
        if (!table) {
            snprintf(errstr, errstr_size, "%s: no ack table %llu in this process", TABLE_PROPERTY,
                     id);
            return RK_CONF_INVALID;
        }
    }
    if (plugin->table)
        table_release(plugin->table);
    plugin->table = table;
    return RK_CONF_OK;
}

static rd_kafka_resp_err_t on_conf_dup(rd_kafka_conf_t *new_conf, const rd_kafka_conf_t *old_conf,
                                       size_t filter_count, const char **filter, void *opaque) {
    (void)old_conf;
    (void)filter_count;
    (void)filter;
    plugin_conf_t *copy = plugin_conf_new(((plugin_conf_t *)opaque)->table);
    if (!copy)
        return RK_ERR_FAIL;
    rd_kafka_resp_err_t err = plugin_conf_register(new_conf, copy);
    if (err)
        on_conf_destroy(copy);
    return err;
}

static rd_kafka_resp_err_t on_conf_destroy(void *opaque) {
    plugin_conf_t *plugin = opaque;
    if (plugin->table)
        table_release(plugin->table);
    free(plugin);
    return RK_ERR_NO_ERROR;
}

static rd_kafka_resp_err_t on_new(rd_kafka_t *client, const rd_kafka_conf_t *conf, void *opaque,
                                  char *errstr, size_t errstr_size) {
    (void)conf;
    (void)errstr;
    (void)errstr_size;
    plugin_conf_t *plugin = opaque;
    if (!plugin->table)
        return RK_ERR_NO_ERROR; /* loaded without a table: records nothing */
    /* The configuration's reference keeps the table alive: librdkafka destroys the client's
     * configuration (on_conf_destroy) only after its threads, and so its acks, have ended. */
    rd_kafka_resp_err_t err = rk.add_on_send(client, IC_NAME, on_send, plugin->table);
    return err ? err : rk.add_on_acknowledgement(client, IC_NAME, on_acknowledgement, plugin->table);
}

/* The plugin entry point librdkafka looks up by name. */
__attribute__((visibility("default"))) rd_kafka_resp_err_t
conf_init(rd_kafka_conf_t *conf, void **plug_opaquep, char *errstr, size_t errstr_size);

rd_kafka_resp_err_t conf_init(rd_kafka_conf_t *conf, void **plug_opaquep, char *errstr,
                              size_t errstr_size) {
    *plug_opaquep = NULL;
    if (!atomic_load(&rk_bound)) {
        snprintf(errstr, errstr_size,
                 "progress-control ack plugin: librdkafka functions not bound "
                 "(import interceptor.native first)");
        return RK_ERR_FAIL;
    }
    plugin_conf_t *plugin = plugin_conf_new(NULL);
    if (!plugin) {
        snprintf(errstr, errstr_size, "progress-control ack plugin: out of memory");
        return RK_ERR_FAIL;
    }
    rd_kafka_resp_err_t err = plugin_conf_register(conf, plugin);
    if (err == RK_ERR_CONFLICT) {
        /* A duplicated configuration: on_conf_dup() registered a copy already. */
        free(plugin);
        return RK_ERR_NO_ERROR;
    }
    if (err) {
        free(plugin);
        snprintf(errstr, errstr_size, "progress-control ack plugin: interceptor not added (%d)",
                 err);
    }
    return err;
}

/* ---- Python: the AckTable type and bind(). ---- */

typedef struct {
    PyObject_HEAD ack_table_t *table;
} AckTableObject;

static PyObject *AckTable_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, ":AckTable", keywords))
        return NULL;
    ack_table_t *table = calloc(1, sizeof *table);
    if (!table)
        return PyErr_NoMemory();
    if (pthread_mutex_init(&table->lock, NULL) != 0) {
        free(table);
        return PyErr_NoMemory();
    }
    if (pthread_mutex_init(&table->flight_lock, NULL) != 0) {
        pthread_mutex_destroy(&table->lock);
        free(table);
        return PyErr_NoMemory();
    }
    atomic_init(&table->refs, 1);
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    AckTableObject *self = (AckTableObject *)alloc(type, 0);
    if (!self) {
        table_release(table);
        return NULL;
    }
    pthread_mutex_lock(&registry_lock);
    table->id = ++last_table_id;
    table->next_registered = registry;
    registry = table;
    pthread_mutex_unlock(&registry_lock);
    self->table = table;
    return (PyObject *)self;
}

static void AckTable_dealloc(AckTableObject *self) {
    ack_table_t *table = self->table;
    if (table) {
        pthread_mutex_lock(&registry_lock);
        for (ack_table_t **link = &registry; *link; link = &(*link)->next_registered) {
            if (*link == table) {
                *link = table->next_registered;
                break;
            }
        }
        pthread_mutex_unlock(&registry_lock);
        table_release(table);
    }
    /* A heap type (PyType_FromSpec): its instances hold a reference to it. */
    PyTypeObject *type = Py_TYPE((PyObject *)self);
    freefunc free_object = (freefunc)PyType_GetSlot(type, Py_tp_free);
    free_object(self);
    Py_DECREF(type);
}

typedef struct {
    const char *topic;
    int32_t partition, timestamp_type;
    int64_t timestamp_ms, ack_ns;
    uint64_t acks;
} drained_t;

static PyObject *AckTable_drain(AckTableObject *self, PyObject *unused) {
    (void)unused;
    ack_table_t *table = self->table;
    drained_t *copies = NULL;
    size_t count = 0;
    int out_of_memory = 0;
    /* Drained often (a quarter second at most): merging here bounds what records in flight
     * take, on a producer whose ticks are never due. */
    pthread_mutex_lock(&table->flight_lock);
    flights_merge(table);
    pthread_mutex_unlock(&table->flight_lock);
    pthread_mutex_lock(&table->lock);
    if (table->dirty_count) {
        copies = malloc(table->dirty_count * sizeof *copies);
        out_of_memory = !copies; /* the entries stay dirty for the next drain */
        if (copies) {
            count = table->dirty_count;
            for (size_t i = 0; i < count; i++) {
                ack_entry_t *entry = &table->entries[table->dirty[i]];
                entry->dirty = 0;
                /* Topic names are never freed or moved while the table lives. */
                copies[i] = (drained_t){entry->topic,        entry->partition,
                                        entry->timestamp_type, entry->timestamp_ms,
                                        entry->ack_ns,       entry->acks};
            }
            table->dirty_count = 0;
        }
    }
    pthread_mutex_unlock(&table->lock);
    if (out_of_memory)
        return PyErr_NoMemory();
    PyObject *result = PyList_New((Py_ssize_t)count);
    for (size_t i = 0; result && i < count; i++) {
        PyObject *item = Py_BuildValue("(siiLdK)", copies[i].topic, copies[i].partition,
                                       copies[i].timestamp_type, (long long)copies[i].timestamp_ms,
                                       (double)copies[i].ack_ns / 1e9,
                                       (unsigned long long)copies[i].acks);
        if (!item) {
            Py_CLEAR(result);
            break;
        }
        if (PyList_SetItem(result, (Py_ssize_t)i, item) < 0) { /* steals item */
            Py_CLEAR(result);
            break;
        }
    }
    free(copies);
    return result;
}

static PyObject *AckTable_in_flight(AckTableObject *self, PyObject *unused) {
    (void)unused;
    ack_table_t *table = self->table;
    typedef struct {
        const char *topic;
        int64_t stamp;
    } oldest_t;
    oldest_t *oldest = NULL;
    size_t count = 0;
    int out_of_memory = 0;
    pthread_mutex_lock(&table->flight_lock);
    flights_merge(table);
    if (table->flight_count) {
        oldest = malloc(table->flight_count * sizeof *oldest);
        out_of_memory = !oldest;
        for (size_t i = 0; oldest && i < table->flight_count; i++) {
            flight_t *flight = &table->flights[i];
            if (flight->sent.len) /* topic names live as long as the table */
                oldest[count++] = (oldest_t){flight->topic, flight->sent.items[0].stamp};
        }
    }
    pthread_mutex_unlock(&table->flight_lock);
    PyObject *result = out_of_memory ? PyErr_NoMemory() : PyDict_New();
    for (size_t i = 0; result && i < count; i++) {
        PyObject *stamp = PyLong_FromLongLong((long long)oldest[i].stamp);
        if (!stamp || PyDict_SetItemString(result, oldest[i].topic, stamp) < 0)
            Py_CLEAR(result);
        Py_XDECREF(stamp);
    }
    free(oldest);
    return result;
}

static PyObject *AckTable_stats(AckTableObject *self, PyObject *unused) {
    (void)unused;
    ack_table_t *table = self->table;
    pthread_mutex_lock(&table->lock);
    unsigned long long partitions = table->count, acks = table->acks, dropped = table->dropped;
    pthread_mutex_unlock(&table->lock);
    pthread_mutex_lock(&table->flight_lock);
    unsigned long long untracked = table->untracked;
    pthread_mutex_unlock(&table->flight_lock);
    long references = atomic_load(&table->refs);
    return Py_BuildValue("{sKsKsKsKsl}", "partitions", partitions, "acks", acks, "dropped",
                         dropped, "untracked", untracked, "references", references);
}

static PyObject *AckTable_id(AckTableObject *self, void *closure) {
    (void)closure;
    return PyLong_FromUnsignedLongLong(self->table->id);
}

static PyMethodDef AckTable_methods[] = {
    {"drain", (PyCFunction)AckTable_drain, METH_NOARGS,
     "drain() -> [(topic, partition, timestamp_type, timestamp_ms, ack_monotonic, acks)]\n\n"
     "The partitions acked since the last drain, each with its last successful ack."},
    {"in_flight", (PyCFunction)AckTable_in_flight, METH_NOARGS,
     "in_flight() -> {topic: timestamp_ms}\n\n"
     "Per topic with records sent and not acknowledged yet, the oldest one's timestamp."},
    {"stats", (PyCFunction)AckTable_stats, METH_NOARGS,
     "stats() -> {'partitions', 'acks', 'dropped', 'untracked', 'references'}"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef AckTable_getset[] = {
    {"id", (getter)AckTable_id, NULL, "The value of " TABLE_PROPERTY " that binds this table.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot AckTable_slots[] = {
    {Py_tp_doc, (void *)"One producer's last successful ack per (topic, partition), recorded in C."},
    {Py_tp_new, (void *)AckTable_new},
    {Py_tp_dealloc, (void *)AckTable_dealloc},
    {Py_tp_methods, AckTable_methods},
    {Py_tp_getset, AckTable_getset},
    {0, NULL},
};

static PyType_Spec AckTable_spec = {
    .name = "interceptor._ackplugin.AckTable",
    .basicsize = sizeof(AckTableObject),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = AckTable_slots,
};

static PyObject *bind(PyObject *module, PyObject *args) {
    (void)module;
    unsigned long long addresses[8];
    if (!PyArg_ParseTuple(args, "KKKKKKKK:bind", &addresses[0], &addresses[1], &addresses[2],
                          &addresses[3], &addresses[4], &addresses[5], &addresses[6],
                          &addresses[7]))
        return NULL;
    for (int i = 0; i < 8; i++) {
        if (!addresses[i]) {
            PyErr_SetString(PyExc_ValueError, "bind(): a null function address");
            return NULL;
        }
    }
    if (atomic_load(&rk_bound)) {
        /* Bound once per process: producers may be using these pointers on other threads. */
        if ((uintptr_t)rk.add_on_conf_set != (uintptr_t)addresses[0]) {
            PyErr_SetString(PyExc_RuntimeError, "bind(): already bound to another librdkafka");
            return NULL;
        }
        Py_RETURN_NONE;
    }
    /* Function pointers from integers: the addresses ctypes found in the loaded librdkafka. */
    *(void **)&rk.add_on_conf_set = (void *)(uintptr_t)addresses[0];
    *(void **)&rk.add_on_conf_dup = (void *)(uintptr_t)addresses[1];
    *(void **)&rk.add_on_conf_destroy = (void *)(uintptr_t)addresses[2];
    *(void **)&rk.add_on_new = (void *)(uintptr_t)addresses[3];
    *(void **)&rk.add_on_acknowledgement = (void *)(uintptr_t)addresses[4];
    *(void **)&rk.add_on_send = (void *)(uintptr_t)addresses[5];
    *(void **)&rk.topic_name = (void *)(uintptr_t)addresses[6];
    *(void **)&rk.message_timestamp = (void *)(uintptr_t)addresses[7];
    atomic_store(&rk_bound, 1);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"bind", bind, METH_VARARGS,
     "bind(conf_interceptor_add_on_conf_set, ..._on_conf_dup, ..._on_conf_destroy, "
     "..._on_new, interceptor_add_on_acknowledgement, interceptor_add_on_send, topic_name, "
     "message_timestamp)\n\n"
     "Give the plugin the addresses of these librdkafka functions (once per process)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "interceptor._ackplugin",
    "A librdkafka interceptor plugin recording producer acks in C (see interceptor.native).", -1,
    module_methods,        NULL,
    NULL,                  NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__ackplugin(void) {
    PyObject *module = PyModule_Create(&module_def);
    if (!module)
        return NULL;
    PyObject *type = PyType_FromSpec(&AckTable_spec);
    if (!type || PyModule_AddObject(module, "AckTable", type) < 0) { /* steals on success */
        Py_XDECREF(type);
        Py_DECREF(module);
        return NULL;
    }
    if (PyModule_AddStringConstant(module, "TABLE_PROPERTY", TABLE_PROPERTY) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
