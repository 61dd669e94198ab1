/* The floor of keymgr's PIN unlock's KDF: the same Argon2id call keymgr makes (`argon2id_hash_raw`), through the
 * same system libargon2, in C, with nothing else around it. The `argon2` CLI, the PIN benchmark's baseline, carries
 * its own copy of the code; benchmarks/pin times this program against it, so the README can say how much of
 * keymgr's ratio is the library keymgr must use.
 *
 *   argon2-floor SALT MEMORY_KIB ITERATIONS PARALLELISM < password      (prints the 32-byte hash in hex)
 */
#include <argon2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 5) { fprintf(stderr, "usage: argon2-floor SALT MEMORY_KIB ITERATIONS PARALLELISM < password\n"); return 64; }
    char password[256];
    size_t length = fread(password, 1, sizeof password, stdin);  /* up to EOF, as the CLI reads it */
    unsigned char hash[32];
    int status = argon2id_hash_raw((uint32_t)atoi(argv[3]), (uint32_t)atoi(argv[2]), (uint32_t)atoi(argv[4]),
                                   password, length, argv[1], strlen(argv[1]), hash, sizeof hash);
    if (status != ARGON2_OK) { fprintf(stderr, "%s\n", argon2_error_message(status)); return 1; }
    for (size_t index = 0; index < sizeof hash; index++) printf("%02x", hash[index]);
    printf("\n");
    return 0;
}
