package sqlitestore_test

func child() bool { return false }
