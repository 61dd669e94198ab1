#ifndef KEYMGR_CARGON2_SHIM_H
#define KEYMGR_CARGON2_SHIM_H
#include <argon2.h>
#endif
