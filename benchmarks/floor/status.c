/* The floor of `keymgr status`: the least a process can do to answer it, in C, with the same system libraries.
 *
 * It opens the store read-only (WAL, shared memory and all), reads the device row and the counts in one statement,
 * reads the device row's MAC (`row_mac`, the row-integrity column), derives a MAC key from the master key with
 * HKDF-SHA256 and computes an HMAC-SHA256 with libcrypto, as keymgr does for the row. No argument parser, no Swift
 * runtime, no Foundation, no GRDB. benchmarks/status times it against the same baseline as keymgr, so the README
 * can say how much of keymgr's ratio is the work itself.
 *
 *   status-floor DB MASTER_KEY_FILE
 */
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: status-floor DB MASTER_KEY_FILE\n"); return 64; }
    unsigned char master[32];
    FILE *keyFile = fopen(argv[2], "rb");
    if (!keyFile || fread(master, 1, sizeof master, keyFile) != sizeof master) { fprintf(stderr, "no master key\n"); return 78; }
    fclose(keyFile);

    sqlite3 *db;
    if (sqlite3_open_v2(argv[1], &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) { fprintf(stderr, "open failed\n"); return 78; }
    sqlite3_stmt *row;
    const char *sql = "SELECT device_id, device_name, row_mac, (SELECT COUNT(*) FROM users), "
        "(SELECT COUNT(*) FROM user_keys WHERE status IN ('active', 'locked')), "
        "(SELECT finished_at FROM sync_state ORDER BY started_at DESC LIMIT 1) FROM device WHERE id = 1";
    if (sqlite3_prepare_v2(db, sql, -1, &row, NULL) != SQLITE_OK || sqlite3_step(row) != SQLITE_ROW) {
        fprintf(stderr, "read failed: %s\n", sqlite3_errmsg(db));
        return 65;
    }
    const char *deviceId = (const char *)sqlite3_column_text(row, 0);
    const char *deviceName = (const char *)sqlite3_column_text(row, 1);

    unsigned char macKey[32];
    EVP_KDF *kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
    EVP_KDF_CTX *kdfContext = EVP_KDF_CTX_new(kdf);
    OSSL_PARAM kdfParameters[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, "SHA256", 0),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, master, sizeof master),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, "keymgr/integrity/device", 23),
        OSSL_PARAM_construct_end(),
    };
    if (EVP_KDF_derive(kdfContext, macKey, sizeof macKey, kdfParameters) != 1) { fprintf(stderr, "HKDF failed\n"); return 1; }

    unsigned char mac[32];
    size_t macLength = 0;
    EVP_MAC *hmac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX *macContext = EVP_MAC_CTX_new(hmac);
    OSSL_PARAM macParameters[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, "SHA256", 0),
        OSSL_PARAM_construct_end(),
    };
    if (EVP_MAC_init(macContext, macKey, sizeof macKey, macParameters) != 1
        || EVP_MAC_update(macContext, (const unsigned char *)deviceId, strlen(deviceId)) != 1
        || EVP_MAC_update(macContext, (const unsigned char *)deviceName, strlen(deviceName)) != 1
        || EVP_MAC_final(macContext, mac, &macLength, sizeof mac) != 1) {
        fprintf(stderr, "HMAC failed\n");
        return 1;
    }
    /* keymgr compares the MAC with the stored one; the floor only computes it (the inputs differ from keymgr's). */
    printf("device id    %s\ndevice name  %s\nusers        %d\nkeys         %d\nlast sync    %s\n", deviceId, deviceName,
           sqlite3_column_int(row, 3), sqlite3_column_int(row, 4),
           sqlite3_column_text(row, 5) ? (const char *)sqlite3_column_text(row, 5) : "never");
    EVP_MAC_CTX_free(macContext);
    EVP_MAC_free(hmac);
    EVP_KDF_CTX_free(kdfContext);
    EVP_KDF_free(kdf);
    sqlite3_finalize(row);
    sqlite3_close(db);
    return 0;
}
