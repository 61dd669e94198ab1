print("keymgr")
