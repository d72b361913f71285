/*
 * serving_harness: loads a SavedModel with the TensorFlow C API the way TF Serving does and runs
 * one signature on requests read from a file.
 *
 * TF_LoadSessionFromSavedModel is the C wrapper of the C++ `LoadSavedModel` that
 * tensorflow_model_server's SavedModelBundle loader calls: it reads saved_model.pb, restores the
 * variables, copies assets and runs the init op (lookup tables).  Custom ops are registered with
 * TF_LoadLibrary on the tensorflow-text op libraries (the server links the same kernels in).
 *
 * Usage:
 *   serving_harness --export_dir DIR [--tag serve] [--library LIB.so]... --requests FILE
 *                   --fetch TENSOR... (--responses FILE | --bench_threads N --bench_iterations M)
 *
 * Request file (little-endian):  "BTR1" u32 num_requests, then per request
 *   u32 num_tensors, per tensor: u32 name_len, name ("op:index"), u32 dtype (TF_DataType),
 *   u32 ndims, i64 dims[ndims], then for TF_STRING each element as u64 len + bytes, otherwise
 *   the raw little-endian values.
 * Response file: "BTR1" u32 num_requests, then per request u32 status (TF_Code, 0 = OK),
 *   u32 message_len, message, u32 num_tensors, tensors as above (named by the fetch names).
 * Bench mode prints one JSON line: threads, requests, errors, p50_ms, p99_ms, qps.
 * A failing request is reported with its status; it never stops the process (exit code 0 unless
 * the harness itself cannot run: 2 = usage/file error, 3 = load error).
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensorflow/c/c_api.h"

#define MAX_ARGS 64
#define MAX_DIMS 8

typedef struct {
  char *name;
  TF_DataType dtype;
  int ndims;
  int64_t dims[MAX_DIMS];
  int64_t count;
  const unsigned char *data; /* raw values, or for strings the first u64 length */
  size_t nbytes;
} InTensor;

typedef struct {
  int ntensors;
  InTensor *tensors;
} Request;

typedef struct {
  const unsigned char *p, *end;
  int ok;
} Reader;

static uint32_t rd_u32(Reader *r) {
  uint32_t v = 0;
  if (r->end - r->p < 4) { r->ok = 0; return 0; }
  memcpy(&v, r->p, 4);
  r->p += 4;
  return v;
}

static uint64_t rd_u64(Reader *r) {
  uint64_t v = 0;
  if (r->end - r->p < 8) { r->ok = 0; return 0; }
  memcpy(&v, r->p, 8);
  r->p += 8;
  return v;
}

static const unsigned char *rd_bytes(Reader *r, uint64_t n) {
  const unsigned char *q = r->p;
  if ((uint64_t)(r->end - r->p) < n) { r->ok = 0; return NULL; }
  r->p += n;
  return q;
}

static int read_tensor(Reader *r, InTensor *t) {
  uint32_t name_len = rd_u32(r);
  const unsigned char *name = rd_bytes(r, name_len);
  if (!r->ok) return 0;
  t->name = (char *)malloc(name_len + 1);
  memcpy(t->name, name, name_len);
  t->name[name_len] = 0;
  t->dtype = (TF_DataType)rd_u32(r);
  t->ndims = (int)rd_u32(r);
  if (!r->ok || t->ndims > MAX_DIMS) return 0;
  t->count = 1;
  for (int i = 0; i < t->ndims; i++) {
    t->dims[i] = (int64_t)rd_u64(r);
    t->count *= t->dims[i];
  }
  if (!r->ok || t->count < 0) return 0;
  t->data = r->p;
  if (t->dtype == TF_STRING) {
    for (int64_t i = 0; i < t->count && r->ok; i++) rd_bytes(r, rd_u64(r));
  } else {
    size_t size = TF_DataTypeSize(t->dtype);
    if (size == 0) return 0;
    rd_bytes(r, (uint64_t)t->count * size);
  }
  t->nbytes = (size_t)(r->p - t->data);
  return r->ok;
}

static unsigned char *read_file(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) { fprintf(stderr, "serving_harness: cannot open %s: %s\n", path, strerror(errno)); return NULL; }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *buf = (unsigned char *)malloc(n > 0 ? (size_t)n : 1);
  if (n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n) { fclose(f); free(buf); return NULL; }
  fclose(f);
  *size = (size_t)n;
  return buf;
}

/* Builds a TF_Tensor from a parsed request tensor (a fresh copy per call, as a server does). */
static TF_Tensor *make_tensor(const InTensor *t) {
  if (t->dtype == TF_STRING) {
    TF_Tensor *out = TF_AllocateTensor(TF_STRING, t->dims, t->ndims, (size_t)t->count * sizeof(TF_TString));
    TF_TString *s = (TF_TString *)TF_TensorData(out);
    Reader r = {t->data, t->data + t->nbytes, 1};
    for (int64_t i = 0; i < t->count; i++) {
      uint64_t len = rd_u64(&r);
      const unsigned char *b = rd_bytes(&r, len);
      TF_StringInit(&s[i]);
      TF_StringCopy(&s[i], (const char *)b, (size_t)len);
    }
    return out;
  }
  TF_Tensor *out = TF_AllocateTensor(t->dtype, t->dims, t->ndims, t->nbytes);
  if (t->nbytes) memcpy(TF_TensorData(out), t->data, t->nbytes);
  return out;
}

static int parse_output(TF_Graph *graph, const char *spec, TF_Output *out) {
  char op[512];
  const char *colon = strrchr(spec, ':');
  size_t n = colon ? (size_t)(colon - spec) : strlen(spec);
  if (n >= sizeof(op)) return 0;
  memcpy(op, spec, n);
  op[n] = 0;
  out->oper = TF_GraphOperationByName(graph, op);
  out->index = colon ? atoi(colon + 1) : 0;
  return out->oper != NULL;
}

typedef struct {
  TF_Session *session;
  TF_Graph *graph;
  const TF_Output *fetches;
  int nfetch;
} Servable;

/* Runs one request. Returns the TF_Code; outputs (nfetch) are set only on success. */
static TF_Code run_request(const Servable *sv, const Request *req, TF_Tensor **outputs, char *msg,
                           size_t msg_size) {
  TF_Output feeds[MAX_ARGS];
  TF_Tensor *values[MAX_ARGS];
  TF_Code code = TF_OK;
  int n = req->ntensors;
  msg[0] = 0;
  if (n > MAX_ARGS) { snprintf(msg, msg_size, "too many inputs"); return TF_INVALID_ARGUMENT; }
  for (int i = 0; i < n; i++) {
    if (!parse_output(sv->graph, req->tensors[i].name, &feeds[i])) {
      snprintf(msg, msg_size, "input tensor %s is not in the graph", req->tensors[i].name);
      return TF_INVALID_ARGUMENT;
    }
  }
  for (int i = 0; i < n; i++) values[i] = make_tensor(&req->tensors[i]);
  for (int i = 0; i < sv->nfetch; i++) outputs[i] = NULL;
  TF_Status *status = TF_NewStatus();
  TF_SessionRun(sv->session, NULL, feeds, values, n, sv->fetches, outputs, sv->nfetch, NULL, 0,
                NULL, status);
  code = TF_GetCode(status);
  if (code != TF_OK) snprintf(msg, msg_size, "%s", TF_Message(status));
  TF_DeleteStatus(status);
  for (int i = 0; i < n; i++) TF_DeleteTensor(values[i]);
  return code;
}

static void w_u32(FILE *f, uint32_t v) { fwrite(&v, 4, 1, f); }
static void w_u64(FILE *f, uint64_t v) { fwrite(&v, 8, 1, f); }

static void write_tensor(FILE *f, const char *name, const TF_Tensor *t) {
  w_u32(f, (uint32_t)strlen(name));
  fwrite(name, 1, strlen(name), f);
  w_u32(f, (uint32_t)TF_TensorType(t));
  int nd = TF_NumDims(t);
  w_u32(f, (uint32_t)nd);
  for (int i = 0; i < nd; i++) w_u64(f, (uint64_t)TF_Dim(t, i));
  if (TF_TensorType(t) == TF_STRING) {
    const TF_TString *s = (const TF_TString *)TF_TensorData(t);
    int64_t count = TF_TensorElementCount(t);
    for (int64_t i = 0; i < count; i++) {
      size_t len = TF_StringGetSize(&s[i]);
      w_u64(f, len);
      fwrite(TF_StringGetDataPointer(&s[i]), 1, len, f);
    }
  } else {
    fwrite(TF_TensorData(t), 1, TF_TensorByteSize(t), f);
  }
}

typedef struct {
  const Servable *sv;
  const Request *requests;
  int nrequests;
  int iterations;
  int offset;
  double *latencies_ms;
  int errors;
  char first_error[512];
} BenchThread;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *bench_thread(void *arg) {
  BenchThread *bt = (BenchThread *)arg;
  TF_Tensor *outputs[MAX_ARGS];
  char msg[512];
  bt->errors = 0;
  bt->first_error[0] = 0;
  for (int i = 0; i < bt->iterations; i++) {
    const Request *req = &bt->requests[(bt->offset + i) % bt->nrequests];
    double t0 = now_s();
    TF_Code code = run_request(bt->sv, req, outputs, msg, sizeof(msg));
    bt->latencies_ms[i] = 1e3 * (now_s() - t0);
    if (code != TF_OK) {
      if (!bt->errors) snprintf(bt->first_error, sizeof(bt->first_error), "%s", msg);
      bt->errors++;
    } else {
      for (int k = 0; k < bt->sv->nfetch; k++) TF_DeleteTensor(outputs[k]);
    }
  }
  return NULL;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : (x > y ? 1 : 0);
}

static void json_escape(FILE *f, const char *s) {
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
}

int main(int argc, char **argv) {
  const char *export_dir = NULL, *requests_path = NULL, *responses_path = NULL;
  const char *tags[MAX_ARGS], *libraries[MAX_ARGS], *fetch_names[MAX_ARGS];
  int ntags = 0, nlib = 0, nfetch = 0, bench_threads = 0, bench_iterations = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) { fprintf(stderr, "serving_harness: %s needs a value\n", a); return 2; }
    if (!strcmp(a, "--export_dir")) export_dir = v;
    else if (!strcmp(a, "--tag") && ntags < MAX_ARGS) tags[ntags++] = v;
    else if (!strcmp(a, "--library") && nlib < MAX_ARGS) libraries[nlib++] = v;
    else if (!strcmp(a, "--fetch") && nfetch < MAX_ARGS) fetch_names[nfetch++] = v;
    else if (!strcmp(a, "--requests")) requests_path = v;
    else if (!strcmp(a, "--responses")) responses_path = v;
    else if (!strcmp(a, "--bench_threads")) bench_threads = atoi(v);
    else if (!strcmp(a, "--bench_iterations")) bench_iterations = atoi(v);
    else { fprintf(stderr, "serving_harness: unknown argument %s\n", a); return 2; }
    i++;
  }
  if (!export_dir || !requests_path || nfetch == 0 ||
      (!responses_path && (bench_threads <= 0 || bench_iterations <= 0))) {
    fprintf(stderr, "usage: serving_harness --export_dir DIR [--tag serve] [--library L]... "
                    "--requests F --fetch T... (--responses F | --bench_threads N --bench_iterations M)\n");
    return 2;
  }
  if (ntags == 0) tags[ntags++] = "serve";

  TF_Status *status = TF_NewStatus();
  for (int i = 0; i < nlib; i++) {
    TF_Library *lib = TF_LoadLibrary(libraries[i], status);
    if (TF_GetCode(status) != TF_OK) {
      fprintf(stderr, "serving_harness: cannot load op library %s: %s\n", libraries[i], TF_Message(status));
      return 3;
    }
    (void)lib; /* Kept loaded for the life of the process, as linked-in kernels are. */
  }

  size_t req_size = 0;
  unsigned char *req_buf = read_file(requests_path, &req_size);
  if (!req_buf) return 2;
  Reader r = {req_buf, req_buf + req_size, 1};
  const unsigned char *magic = rd_bytes(&r, 4);
  if (!magic || memcmp(magic, "BTR1", 4)) { fprintf(stderr, "serving_harness: %s is not a request file\n", requests_path); return 2; }
  int nreq = (int)rd_u32(&r);
  Request *requests = (Request *)calloc(nreq > 0 ? nreq : 1, sizeof(Request));
  for (int i = 0; i < nreq && r.ok; i++) {
    requests[i].ntensors = (int)rd_u32(&r);
    requests[i].tensors = (InTensor *)calloc(requests[i].ntensors + 1, sizeof(InTensor));
    for (int k = 0; k < requests[i].ntensors; k++)
      if (!read_tensor(&r, &requests[i].tensors[k])) { r.ok = 0; break; }
  }
  if (!r.ok) { fprintf(stderr, "serving_harness: %s is truncated or malformed\n", requests_path); return 2; }

  double t_load = now_s();
  TF_Graph *graph = TF_NewGraph();
  TF_SessionOptions *opts = TF_NewSessionOptions();
  TF_Session *session = TF_LoadSessionFromSavedModel(opts, NULL, export_dir, tags, ntags, graph, NULL, status);
  if (TF_GetCode(status) != TF_OK) {
    fprintf(stderr, "serving_harness: cannot load SavedModel %s: %s\n", export_dir, TF_Message(status));
    return 3;
  }
  t_load = now_s() - t_load;
  TF_Output fetches[MAX_ARGS];
  for (int i = 0; i < nfetch; i++) {
    if (!parse_output(graph, fetch_names[i], &fetches[i])) {
      fprintf(stderr, "serving_harness: output tensor %s is not in the graph\n", fetch_names[i]);
      return 3;
    }
  }
  Servable sv = {session, graph, fetches, nfetch};

  if (responses_path) {
    FILE *f = fopen(responses_path, "wb");
    if (!f) { fprintf(stderr, "serving_harness: cannot write %s\n", responses_path); return 2; }
    fwrite("BTR1", 1, 4, f);
    w_u32(f, (uint32_t)nreq);
    TF_Tensor *outputs[MAX_ARGS];
    char msg[4096];
    for (int i = 0; i < nreq; i++) {
      TF_Code code = run_request(&sv, &requests[i], outputs, msg, sizeof(msg));
      w_u32(f, (uint32_t)code);
      w_u32(f, (uint32_t)strlen(msg));
      fwrite(msg, 1, strlen(msg), f);
      w_u32(f, code == TF_OK ? (uint32_t)nfetch : 0u);
      if (code == TF_OK) {
        for (int k = 0; k < nfetch; k++) {
          write_tensor(f, fetch_names[k], outputs[k]);
          TF_DeleteTensor(outputs[k]);
        }
      }
    }
    fclose(f);
  } else {
    pthread_t threads[256];
    BenchThread bt[256];
    if (bench_threads > 256) bench_threads = 256;
    double *lat = (double *)calloc((size_t)bench_threads * bench_iterations, sizeof(double));
    /* One warm-up pass over the requests (the first run of a signature builds its executors). */
    TF_Tensor *outputs[MAX_ARGS];
    char msg[512];
    for (int i = 0; i < nreq; i++)
      if (run_request(&sv, &requests[i], outputs, msg, sizeof(msg)) == TF_OK)
        for (int k = 0; k < nfetch; k++) TF_DeleteTensor(outputs[k]);
    double t0 = now_s();
    for (int i = 0; i < bench_threads; i++) {
      bt[i] = (BenchThread){&sv, requests, nreq, bench_iterations, i, lat + (size_t)i * bench_iterations, 0, {0}};
      pthread_create(&threads[i], NULL, bench_thread, &bt[i]);
    }
    int errors = 0;
    const char *first_error = "";
    for (int i = 0; i < bench_threads; i++) {
      pthread_join(threads[i], NULL);
      if (bt[i].errors && !errors) first_error = bt[i].first_error;
      errors += bt[i].errors;
    }
    double wall = now_s() - t0;
    size_t total = (size_t)bench_threads * bench_iterations;
    qsort(lat, total, sizeof(double), cmp_double);
    double p50 = lat[(size_t)(0.50 * (double)(total - 1))];
    double p99 = lat[(size_t)(0.99 * (double)(total - 1))];
    printf("{\"threads\": %d, \"requests\": %zu, \"errors\": %d, \"load_s\": %.3f, \"wall_s\": %.3f, "
           "\"p50_ms\": %.3f, \"p99_ms\": %.3f, \"max_ms\": %.3f, \"qps\": %.1f, \"first_error\": \"",
           bench_threads, total, errors, t_load, wall, p50, p99, lat[total - 1], (double)total / wall);
    json_escape(stdout, first_error);
    printf("\"}\n");
    free(lat);
  }
  TF_CloseSession(session, status);
  TF_DeleteSession(session, status);
  TF_DeleteGraph(graph);
  TF_DeleteSessionOptions(opts);
  TF_DeleteStatus(status);
  return 0;
}
