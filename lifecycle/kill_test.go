package lifecycle_test

// helperEnv makes the test binary act as a runner process (see helperMain).
const helperEnv = "CONVEYOR_LIFECYCLE_HELPER"

func helperMain() int { return 0 }
