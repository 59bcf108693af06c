BUILD_TREE = '/work/main/build'
