#include "keymgr_curl.h"

#include <curl/curl.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

// The entry points keymgr uses, resolved from libcurl.so.4 at first use. setopt and getinfo are variadic in
// libcurl; they are called here, in C, through pointers of their real (variadic) type.
static struct {
    CURLcode (*global_init)(long);
    CURL *(*easy_init)(void);
    CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
    CURLcode (*easy_perform)(CURL *);
    CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
    void (*easy_cleanup)(CURL *);
    const char *(*easy_strerror)(CURLcode);
    struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
    void (*slist_free_all)(struct curl_slist *);
} api;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int load_status = -1;
static char load_error[256];

static void load(void) {
    void *library = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        snprintf(load_error, sizeof load_error, "cannot load libcurl.so.4 (Debian package libcurl4): %s", dlerror());
        return;
    }
#define RESOLVE(field, symbol)                                                                   \
    *(void **)(&api.field) = dlsym(library, symbol);                                             \
    if (!api.field) {                                                                            \
        snprintf(load_error, sizeof load_error, "libcurl.so.4 has no %s: it is too old", symbol); \
        return;                                                                                  \
    }
    RESOLVE(global_init, "curl_global_init")
    RESOLVE(easy_init, "curl_easy_init")
    RESOLVE(easy_setopt, "curl_easy_setopt")
    RESOLVE(easy_perform, "curl_easy_perform")
    RESOLVE(easy_getinfo, "curl_easy_getinfo")
    RESOLVE(easy_cleanup, "curl_easy_cleanup")
    RESOLVE(easy_strerror, "curl_easy_strerror")
    RESOLVE(slist_append, "curl_slist_append")
    RESOLVE(slist_free_all, "curl_slist_free_all")
#undef RESOLVE
    if (api.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        snprintf(load_error, sizeof load_error, "libcurl could not initialise");
        return;
    }
    load_status = 0;
}

int keymgr_curl_load(void) {
    pthread_once(&load_once, load);
    return load_status;
}

const char *keymgr_curl_load_error(void) { return load_status == 0 ? NULL : load_error; }

int keymgr_curl_perform(const keymgr_curl_request *request, long *status) {
    if (keymgr_curl_load() != 0) return CURLE_FAILED_INIT;
    CURL *handle = api.easy_init();
    if (!handle) return CURLE_FAILED_INIT;
    struct curl_slist *headers = NULL;
    CURLcode code = CURLE_OK;
    for (size_t index = 0; index < request->header_count && code == CURLE_OK; index++) {
        struct curl_slist *next = api.slist_append(headers, request->headers[index]);
        if (!next) code = CURLE_OUT_OF_MEMORY; else headers = next;
    }
    // No "Expect: 100-continue" round trip: servers answer the request as sent.
    if (code == CURLE_OK) {
        struct curl_slist *next = api.slist_append(headers, "Expect:");
        if (!next) code = CURLE_OUT_OF_MEMORY; else headers = next;
    }
#define SET(option, value) if (code == CURLE_OK) code = api.easy_setopt(handle, option, value)
    SET(CURLOPT_URL, request->url);
    SET(CURLOPT_PROTOCOLS_STR, "http,https");
    SET(CURLOPT_CUSTOMREQUEST, request->method);
    SET(CURLOPT_HTTPHEADER, headers);
    SET(CURLOPT_NOSIGNAL, 1L);
    SET(CURLOPT_FOLLOWLOCATION, 0L);
    SET(CURLOPT_TIMEOUT_MS, request->timeout_ms);
    SET(CURLOPT_CONNECTTIMEOUT_MS, request->timeout_ms);
    SET(CURLOPT_WRITEFUNCTION, request->on_body);
    SET(CURLOPT_WRITEDATA, request->context);
    SET(CURLOPT_HEADERFUNCTION, request->on_header);
    SET(CURLOPT_HEADERDATA, request->context);
    if (request->has_body) {
        SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)request->body_length);
        SET(CURLOPT_COPYPOSTFIELDS, request->body_length ? request->body : "");
    }
#undef SET
    if (code == CURLE_OK) code = api.easy_perform(handle);
    if (code == CURLE_OK) api.easy_getinfo(handle, CURLINFO_RESPONSE_CODE, status);
    api.easy_cleanup(handle);
    api.slist_free_all(headers);
    return (int)code;
}

const char *keymgr_curl_error_text(int code) {
    if (keymgr_curl_load() != 0) return load_error;
    return api.easy_strerror((CURLcode)code);
}

int keymgr_curl_code_timeout(void) { return CURLE_OPERATION_TIMEDOUT; }
int keymgr_curl_code_write_error(void) { return CURLE_WRITE_ERROR; }
