print("keymgr-refserver")
