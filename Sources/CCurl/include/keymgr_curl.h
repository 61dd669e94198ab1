#ifndef KEYMGR_CURL_H
#define KEYMGR_CURL_H
#include <stddef.h>

// The system libcurl, loaded with dlopen on first use, so commands that never talk to a server never pay for
// loading it and its thirty-odd dependencies. Every call returns 0 on success or a libcurl error code.

typedef size_t (*keymgr_curl_data_callback)(char *data, size_t size, size_t count, void *context);

/// What one transfer needs; strings are NUL-terminated, headers are "Name: value" lines.
typedef struct {
    const char *url;
    const char *method;
    const char *const *headers;
    size_t header_count;
    const void *body;
    size_t body_length;
    int has_body;
    long timeout_ms;
    keymgr_curl_data_callback on_body;
    keymgr_curl_data_callback on_header;
    void *context;
} keymgr_curl_request;

/// Loads libcurl (once); 0 when it is usable, -1 when the library cannot be loaded.
int keymgr_curl_load(void);

/// Why keymgr_curl_load failed, or NULL.
const char *keymgr_curl_load_error(void);

/// Runs one transfer; fills *status with the HTTP status. Returns a CURLcode (0 is success).
int keymgr_curl_perform(const keymgr_curl_request *request, long *status);

/// libcurl's text for a CURLcode.
const char *keymgr_curl_error_text(int code);

/// The CURLcode of a timeout and of a transfer a callback stopped.
int keymgr_curl_code_timeout(void);
int keymgr_curl_code_write_error(void);

#endif
