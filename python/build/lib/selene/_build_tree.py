BUILD_TREE = '/work/wt/serving/build'
