#ifndef KEYMGR_CTSS2_SHIM_H
#define KEYMGR_CTSS2_SHIM_H
#include <tss2/tss2_esys.h>
#include <tss2/tss2_mu.h>
#include <tss2/tss2_rc.h>
#include <tss2/tss2_sys.h>
#include <tss2/tss2_tctildr.h>
#endif
