// RefServer module
